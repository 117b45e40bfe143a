"""The public entry points: verify_math (a response against a gold answer, one deadline per call),
extract_final_answer, check_gold and the JSON-lines body verify_stream; with the gold-answer cache
and the fast path for plain numbers."""
from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import BinaryIO, Iterable, TextIO

from posttrain.rewards.math.compare import NumeralRule, is_hedged, values_equal
from posttrain.rewards.math.extract import extract_boxes
from posttrain.rewards.math.limits import (
    TIME_BUDGET_S, Deadline, Hedged, Timeout, TooExpensive, Unparsable, armed,
)
from posttrain.rewards.math.normalise import THOUSANDS_WHOLE_RE, clean_answer
from posttrain.rewards.math.parse import rational_node
from posttrain.rewards.math.values import Scalar, parse_value
from posttrain.rewards.math.worker import prestart_worker

MATH_VERIFIER_VERSION = "math-verifier/5"   # words after the last box that qualify it: `qualified`

# a plain number (the fast path: compared as a Fraction, nothing parsed)
_SIMPLE_NUM_RE = re.compile(r"^\s*\$?\s*([-+]?)(\d+(?:\.\d+)?|\.\d+)\s*\$?\s*\.?\s*$")
# "5 or 6": a hedge when the gold is one value
_OR_RE = re.compile(r"(?<![A-Za-z])or(?![A-Za-z])")


@dataclass(frozen=True)
class Verdict:
    reward: float  # 1.0 or 0.0
    reason: str  # match | mismatch | no_box | think_only | hedged | qualified | unevaluated | unparsable_response |
    #              unparsable_gold | too_expensive | timeout | empty_gold
    answer: str | None  # the extracted final answer text (None if none)


class GoldAnswerError(ValueError):
    """A gold answer that cannot be parsed; the message names the gold string."""


def extract_final_answer(response: str) -> tuple[str | None, str]:
    """The final answer text (content of the last box of the answer part) and "ok", or None and the
    reason (no_box | think_only | hedged | unparsable_response | timeout)."""
    try:
        if not isinstance(response, str):
            return None, "unparsable_response"
        with armed(TIME_BUDGET_S) as deadline:
            boxes, reason = extract_boxes(response)
            if reason is not None:
                return None, reason
            answer = boxes[-1]
            assert answer is not None
            thousands = any(b is not None and THOUSANDS_WHOLE_RE.match(b.strip()) for b in boxes)
            if len(boxes) > 1 and is_hedged(boxes, thousands, deadline):
                return None, "hedged"
        return answer, "ok"
    except Timeout:
        return None, "timeout"
    except Exception:  # pragma: no cover - defensive
        return None, "unparsable_response"


def _pure_rational(ast) -> bool:
    """Only rationals, sums, products and rational powers: no need for the sympy worker."""
    stack = [ast]
    while stack:
        node = stack.pop()
        op = node[0]
        if op == "n":
            continue
        if op in ("+", "*"):
            stack.extend(node[1:])
        elif op == "^":
            stack.append(node[1])
            if node[2][0] != "n":
                stack.append(node[2])
        else:
            return False
    return True


@lru_cache(maxsize=8192)
def _gold_cached(gold: str) -> tuple:
    """("ok", value, cleaned, fastfrac|None) or ("err", reason, message)."""
    if not gold.strip():
        return ("err", "empty_gold", "gold answer is empty")
    m = _SIMPLE_NUM_RE.match(gold)
    if m:
        v = Fraction(m.group(2))
        if m.group(1) == "-":
            v = -v
        return ("ok", ("scalar", Scalar(rational_node(v))), None, v)
    thousands = bool(THOUSANDS_WHOLE_RE.match(gold.strip()))
    try:
        cleaned = clean_answer(gold, thousands)
        value = parse_value(gold, thousands)
    except Unparsable as e:
        return ("err", "unparsable_gold", str(e))
    except TooExpensive as e:
        return ("err", "too_expensive", str(e))
    except RecursionError:
        return ("err", "too_expensive", "nested too deeply")
    if not _pure_value(value):
        prestart_worker()
    return ("ok", value, cleaned, None)


def _pure_value(v: tuple) -> bool:
    if v[0] == "scalar":
        return _pure_rational(v[1].ast)
    return v[0] == "text"


def check_gold(gold: str) -> None:
    """Raise GoldAnswerError (naming the gold string) if the gold answer cannot be parsed."""
    if not isinstance(gold, str):
        raise GoldAnswerError(f"gold answer {gold!r} is not a string")
    r = _gold_cached(gold)
    if r[0] == "err" and r[1] in ("empty_gold", "unparsable_gold"):
        raise GoldAnswerError(f"cannot parse gold answer {gold!r}: {r[2]}")


def verify_math(response: str, gold: str, prompt: str | None = None) -> Verdict:
    """Score one response against a gold answer.  Never raises; one deadline (TIME_BUDGET_S) covers
    the whole call: extraction, parsing, every box and the comparison (``timeout`` when it runs out).
    The ``prompt`` is accepted from every caller but no verdict depends on it: an answer that restates
    the question is an unevaluated expression for a plain-number gold, with or without it
    (`NumeralRule`), so evaluation, training and ``posttrain verify`` pay the same.
    The last verdicts are remembered (the length reward asks again about the batch correctness just
    scored), except timeouts: a sympy worker still starting is no verdict on the answer."""
    del prompt
    key = (response, gold) if isinstance(response, str) and isinstance(gold, str) else None
    with _REMEMBERED_LOCK:
        remembered = _REMEMBERED.get(key) if key is not None else None
        if remembered is not None:
            _REMEMBERED.move_to_end(key)
            return remembered
    verdict = _verify_once(response, gold)
    if key is not None and verdict.reason != "timeout":
        with _REMEMBERED_LOCK:
            _REMEMBERED[key] = verdict
            if len(_REMEMBERED) > 1024:
                _REMEMBERED.popitem(last=False)
    return verdict


_REMEMBERED: OrderedDict[tuple[str, str], Verdict] = OrderedDict()
_REMEMBERED_LOCK = threading.Lock()


def _verify_once(response, gold) -> Verdict:
    found: list[str] = []  # the extracted answer, reported with every verdict once known
    try:
        with armed(TIME_BUDGET_S) as deadline:
            return _verify(response, gold, deadline, found)
    except TooExpensive:
        reason = "too_expensive"
    except RecursionError:
        reason = "too_expensive"
    except Timeout:
        reason = "timeout"
    except Hedged:
        reason = "hedged"
    except Exception:  # Unparsable, and never raise into a trainer
        reason = "unparsable_response"
    return Verdict(0.0, reason, found[0] if found else None)


def _verify(response, gold, deadline: Deadline, found: list) -> Verdict:
    if not isinstance(gold, str):
        gold = "" if gold is None or isinstance(gold, bool) else str(gold)
    if not isinstance(response, str):
        response = "" if response is None else str(response)
    g = _gold_cached(gold)
    boxes, reason = extract_boxes(response)
    answer = None
    if boxes and boxes[-1] is not None and boxes[-1].strip():
        answer = boxes[-1]
        found.append(answer)
    if g[0] == "err":
        return Verdict(0.0, g[1], answer)
    if reason is not None:
        return Verdict(0.0, reason, answer)
    assert answer is not None
    gval, gclean, gfrac = g[1], g[2], g[3]
    # fast path: a plain number against a plain-number gold
    if gfrac is not None and len(boxes) == 1 and len(answer) <= 100:
        m = _SIMPLE_NUM_RE.match(answer)
        if m:
            v = Fraction(m.group(2))
            if m.group(1) == "-":
                v = -v
            return Verdict(1.0 if v == gfrac else 0.0, "match" if v == gfrac else "mismatch", answer)
    thousands = gval[0] == "scalar"
    if len(boxes) > 1 and is_hedged(boxes, thousands, deadline):
        return Verdict(0.0, "hedged", answer)
    if gclean is not None and clean_answer(answer, thousands) == gclean:
        return Verdict(1.0, "match", answer)
    aval = parse_value(answer, thousands)
    if aval[0] == "list" and gval[0] in ("scalar", "text") and _OR_RE.search(answer):
        return Verdict(0.0, "hedged", answer)  # "5 or 6" for a single-valued gold
    rule = NumeralRule()
    if values_equal(aval, gval, deadline, rule):
        return Verdict(1.0, "match", answer)
    # the right value written as an expression where the gold is a plain number
    return Verdict(0.0, "unevaluated" if rule.refused else "mismatch", answer)


_MAX_LINE_BYTES = 16 << 20  # one input line; a longer one is reported bad_input, not read whole


def verify_stream(lines: Iterable[str | bytes] | BinaryIO | TextIO, out: TextIO | BinaryIO) -> dict:
    """Read JSON lines {"response": ..., "answer": ...}; write one JSON verdict line per non-blank
    input line, flushed.  Never raises on the input: a line that is not valid UTF-8, not a JSON
    object with both keys, or too long gets {"reason": "bad_input", "error": ...}.  The output is
    valid UTF-8 (a lone surrogate from a JSON escape is written as U+FFFD); a binary ``out`` gets
    UTF-8 bytes whatever the locale.  Returns {"lines", "bad_input", "bad_lines" (first 20)}."""
    from posttrain.rewards.verify_cli import check_math, verify_lines  # the loop every verify kind shares

    prestart_worker()
    return verify_lines(lines, out, check_math, max_line_bytes=_MAX_LINE_BYTES)
