"""The public entry points: verify_math (a response against a gold answer, one deadline per call),
extract_final_answer, check_gold and the JSON-lines body verify_stream; with the gold-answer cache
and the fast path for plain numbers."""
from __future__ import annotations

import re
import threading
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import BinaryIO, Iterable, TextIO

from posttrain.rewards.math.compare import is_hedged, values_equal
from posttrain.rewards.math.extract import extract_boxes
from posttrain.rewards.math.limits import (
    TIME_BUDGET_S, Deadline, Hedged, Timeout, TooExpensive, Unparsable, armed,
)
from posttrain.rewards.math.normalise import THOUSANDS_WHOLE_RE, clean_answer
from posttrain.rewards.math.parse import rational_node
from posttrain.rewards.math.values import Scalar, parse_value
from posttrain.rewards.math.worker import prestart_worker

MATH_VERIFIER_VERSION = "math-verifier/3"

# a plain number (the fast path: compared as a Fraction, nothing parsed)
_SIMPLE_NUM_RE = re.compile(r"^\s*\$?\s*([-+]?)(\d+(?:\.\d+)?|\.\d+)\s*\$?\s*\.?\s*$")
# "5 or 6": a hedge when the gold is one value
_OR_RE = re.compile(r"(?<![A-Za-z])or(?![A-Za-z])")


@dataclass(frozen=True)
class Verdict:
    reward: float  # 1.0 or 0.0
    reason: str  # match | mismatch | no_box | think_only | hedged | unevaluated | unparsable_response |
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


_MINUS_ONE = ["n", -1, 1]
_TEN = ["n", 10, 1]


def _unsigned(ast) -> list:
    return ast[2] if ast[0] == "*" and len(ast) == 3 and ast[1] == _MINUS_ONE else ast


def _literal(ast) -> bool:
    return _unsigned(ast)[0] == "n"


def _fraction(ast) -> tuple[Fraction, Fraction] | None:
    """(numerator, denominator) of a fraction of two number literals (``\\frac{3}{4}``, ``-3/4``)."""
    if ast[0] == "*" and len(ast) == 3 and _literal(ast[1]) and ast[2][0] == "^" and ast[2][2] == _MINUS_ONE \
            and ast[2][1][0] == "n":
        num, den = _unsigned(ast[1]), ast[2][1]
        return Fraction(num[1], num[2]), Fraction(den[1], den[2])
    return None


def numeral(ast) -> bool:
    """A number written as a number, not as a computation: ``108``, ``-0.5``, ``1.08e2``, ``50\\%``,
    a fraction in lowest terms (``\\frac{3}{4}``), a mixed number (``3\\frac{1}{2}``), scientific
    notation (``1.2 \\times 10^{3}``)."""
    ast = _unsigned(ast)
    if ast[0] == "n":
        return True
    if ast[0] == "^":   # 10^{-3}
        return ast[1] == _TEN and _literal(ast[2])
    if ast[0] == "+" and len(ast) == 3 and ast[1][0] == "n":   # a mixed number: whole + proper fraction
        part = _fraction(ast[2])
        return part is not None and 0 < part[0] < part[1] and _lowest_terms(*part)
    if ast[0] == "*" and len(ast) == 3 and ast[1][0] == "n" and ast[2][0] == "^" and ast[2][1] == _TEN:
        return _literal(ast[2][2])   # scientific notation
    part = _fraction(ast)
    return part is not None and _lowest_terms(*part)


def _lowest_terms(num: Fraction, den: Fraction) -> bool:
    """Integers with no common factor, the denominator above 1 (``\\frac{216}{2}`` is a division to do)."""
    if num.denominator != 1 or den.denominator != 1 or den <= 1:
        return False
    from math import gcd

    return gcd(int(num), int(den)) == 1


_PROMPT_NUMBER_RE = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")


@lru_cache(maxsize=4096)
def _prompt_numbers(prompt: str) -> frozenset[Fraction]:
    """The numbers a prompt states (NFKC: fullwidth digits too), and 0 and 1, which any answer can
    add without doing the question's work (``71 + 37 + 0``)."""
    text = unicodedata.normalize("NFKC", prompt)
    found = {Fraction(0), Fraction(1)}
    for m in _PROMPT_NUMBER_RE.finditer(text):
        found.add(Fraction(m.group(0).replace(",", "")))
        found.update(Fraction(part) for part in m.group(0).split(",") if part)   # "3,4" may be two numbers
    return frozenset(found)


def _literals(ast) -> set[Fraction]:
    out, stack = set(), [ast]
    while stack:
        node = stack.pop()
        if node[0] == "n":
            out.add(abs(Fraction(node[1], node[2])))
        else:
            stack.extend(child for child in node[1:] if isinstance(child, list))
    return out


def restates(answer: tuple, gold: tuple, prompt: str) -> bool:
    """The answer restates the question instead of answering it: the gold is written as a number,
    the answer is not one (`numeral`), and every number in it is one the prompt states
    (``\\boxed{71 + 37}`` or ``\\boxed{37 + 71}`` for "Compute 71 + 37"; its value is right, the work
    undone). ``2^{10}`` for "How many subsets has a set of 10?" uses a number of its own: work."""
    if gold[0] != "scalar" or answer[0] != "scalar" or not numeral(gold[1].ast) or numeral(answer[1].ast):
        return False
    return _literals(answer[1].ast) <= _prompt_numbers(prompt)


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
    With the ``prompt``, an answer that restates the question is ``unevaluated`` (`restates`).
    The last verdicts are remembered (the length reward asks again about the batch correctness just
    scored), except timeouts: a sympy worker still starting is no verdict on the answer."""
    key = (response, gold, prompt) if isinstance(response, str) and isinstance(gold, str) \
        and isinstance(prompt, (str, type(None))) else None
    with _REMEMBERED_LOCK:
        remembered = _REMEMBERED.get(key) if key is not None else None
        if remembered is not None:
            _REMEMBERED.move_to_end(key)
            return remembered
    verdict = _verify_once(response, gold, prompt if isinstance(prompt, str) else None)
    if key is not None and verdict.reason != "timeout":
        with _REMEMBERED_LOCK:
            _REMEMBERED[key] = verdict
            if len(_REMEMBERED) > 1024:
                _REMEMBERED.popitem(last=False)
    return verdict


_REMEMBERED: OrderedDict[tuple[str, str, str | None], Verdict] = OrderedDict()
_REMEMBERED_LOCK = threading.Lock()


def _verify_once(response, gold, prompt: str | None) -> Verdict:
    found: list[str] = []  # the extracted answer, reported with every verdict once known
    try:
        with armed(TIME_BUDGET_S) as deadline:
            return _verify(response, gold, prompt, deadline, found)
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


def _verify(response, gold, prompt: str | None, deadline: Deadline, found: list) -> Verdict:
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
    if prompt is not None and restates(aval, gval, prompt):
        return Verdict(0.0, "unevaluated", answer)
    if aval[0] == "list" and gval[0] in ("scalar", "text") and _OR_RE.search(answer):
        return Verdict(0.0, "hedged", answer)  # "5 or 6" for a single-valued gold
    ok = values_equal(aval, gval, deadline)
    return Verdict(1.0 if ok else 0.0, "match" if ok else "mismatch", answer)


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
