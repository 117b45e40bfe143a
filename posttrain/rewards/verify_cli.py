"""`posttrain verify --kind KIND`: audit a reward from the shell on JSONL before training on it.

One loop (`verify_lines`) serves every kind: it reads bytes a line at a time (a line over the size
bound is skipped, not read whole), decodes each line on its own, parses one JSON object, hands it to
the kind's check and writes one verdict line as UTF-8 JSON, flushed. Nothing on the input makes it
raise: a line that is not UTF-8, not JSON, not an object, or lacks what its kind needs gets
{"reward": 0.0, "reason": "bad_input", "error": "line N: ...", "field": ...} and is counted. A check
that raises anyway (a verifier bug) gets {"reason": "verifier_error"} and is counted apart, so the
rest of the stream is still judged.

What each kind reads, besides "response" (the whole reply, think block included):
  math         "answer" (gold), optional "prompt"     -> rewards.verify_row, as training and evaluation
  instruction  "constraints" (list, one object or a JSON string of them), or the IFEval form
               "instruction_id_list" + "kwargs"; optional "answer" (the task's reference) and
               "prompt" (the guards judge engagement with it)
                                                     -> rewards.verify_row: the checkers, then the
                                                        guards (reason guard:<name> when they refuse)
  code         "tests" (list of {"input","output"} / {"call","expected"}, or a JSON string of it)
                                                     -> code_judge.extract_code + run_tests
  format       "thinking" (true / false)             -> format.format_ok and format.mode_ok
  language     "language" ("en" / "zh")              -> language.language_share of the reasoning
  tool         "response" is the episode's transcript (posttrain.agents.episodes' canonical text) or
               "messages" its chat messages; "environment", optional "setup", "expected_state",
               "answer", "answer_kind"       -> rewards.verify_row: the calls replayed, state and
                                                reply checked, with the replayed calls and state

Reward modules are imported by the kind that needs them, so this module stays cheap to import.
"""
from __future__ import annotations

import io
import json
import re
from typing import Any, BinaryIO, Callable, Iterable, Iterator, TextIO

MAX_LINE_BYTES = 16 << 20  # one input line; a longer one is reported bad_input, not read whole
SURROGATE_RE = re.compile("[\ud800-\udfff]")
# a JSON escape of a UTF-16 surrogate: only lines with one can decode to a lone surrogate
_SURROGATE_ESCAPE_RE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class BadInput(ValueError):
    """A line the kind cannot judge; `field` names the key at fault (None: the line as a whole)."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


Check = Callable[[dict], dict]


def field(obj: dict, key: str, types: type | tuple[type, ...], what: str) -> Any:
    """obj[key] when present and of `types` (a bool only where `types` names bool), else BadInput."""
    if key not in obj:
        raise BadInput(f"missing key {key!r}", key)
    value = obj[key]
    allowed = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        raise BadInput(f"{key!r} must be {what}", key)
    return value


def input_lines(lines, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[str | bytes | None]:
    """The lines of a stream, read in bounded pieces (None marks a line over max_line_bytes), or
    the items of any other iterable of str / bytes."""
    readline = getattr(lines, "readline", None)
    if readline is None:
        yield from lines
        return
    while True:
        line = readline(max_line_bytes + 1)
        if not line:
            return
        if len(line) > max_line_bytes:
            nl = b"\n" if isinstance(line, bytes) else "\n"
            while line and not line.endswith(nl):  # skip the rest of that line
                line = readline(1 << 20)
            yield None
        else:
            yield line


def _without_surrogates(obj: Any) -> Any:
    """obj with every lone surrogate in its strings (keys included) replaced by U+FFFD: a reply
    decoded by a tokenizer never holds one, and the reward modules (opencc, the sandbox's pipes)
    may refuse to encode it."""
    fix = lambda s: SURROGATE_RE.sub("\ufffd", s)  # noqa: E731
    if isinstance(obj, str):
        return fix(obj)
    root = [obj]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        holder, key = stack.pop()
        value = holder[key]
        if isinstance(value, str):
            holder[key] = fix(value)
        elif isinstance(value, list):
            stack.extend((value, i) for i in range(len(value)))
        elif isinstance(value, dict):
            fixed = {fix(k): v for k, v in value.items()}
            value.clear()
            value.update(fixed)
            stack.extend((value, k) for k in value)
    return root[0]


def _parse_line(n: int, line: str | bytes | None, max_line_bytes: int) -> dict:
    if line is None:
        raise BadInput(f"line longer than {max_line_bytes} bytes")
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadInput(f"invalid UTF-8 at byte {e.start}") from None
    try:
        obj = json.loads(line.lstrip("\ufeff") if n == 1 else line)
    except (ValueError, RecursionError) as e:
        raise BadInput(f"invalid JSON: {str(e)[:200]}") from None
    if not isinstance(obj, dict):
        raise BadInput("expected a JSON object")
    return _without_surrogates(obj) if _SURROGATE_ESCAPE_RE.search(line) else obj


def _record(n: int, line: str | bytes | None, check: Check, max_line_bytes: int) -> dict:
    try:
        return check(_parse_line(n, line, max_line_bytes))
    except BadInput as e:
        rec = {"reward": 0.0, "reason": "bad_input", "error": f"line {n}: {e}"}
        return rec if e.field is None else {**rec, "field": e.field}
    except Exception as e:  # noqa: BLE001 - a verifier bug must not lose the rest of the stream
        return {"reward": 0.0, "reason": "verifier_error", "error": f"line {n}: {type(e).__name__}: {str(e)[:300]}"}


def verify_lines(lines: Iterable[str | bytes] | BinaryIO | TextIO, out: TextIO | BinaryIO, check: Check, *,
                 max_line_bytes: int = MAX_LINE_BYTES) -> dict:
    """Write one verdict line per non-blank input line, flushed; never raises on the input. The
    output is valid UTF-8 (a lone surrogate is written as U+FFFD); a binary `out` gets UTF-8 bytes
    whatever the locale. Returns {"lines", "bad_input", "bad_lines" (first 20)}, plus "errors" and
    "error_lines" when a check raised."""
    binary = not isinstance(out, io.TextIOBase)
    counts: dict = {"lines": 0, "bad_input": 0, "bad_lines": []}
    for n, line in enumerate(input_lines(lines, max_line_bytes), 1):
        if line is not None and not line.strip():
            continue
        rec = _record(n, line, check, max_line_bytes)
        counts["lines"] += 1
        if rec["reason"] in ("bad_input", "verifier_error"):
            total, where = ("bad_input", "bad_lines") if rec["reason"] == "bad_input" else ("errors", "error_lines")
            counts[total] = counts.get(total, 0) + 1
            if len(counts.setdefault(where, [])) < 20:
                counts[where].append(n)
        text = SURROGATE_RE.sub("\ufffd", json.dumps(rec, ensure_ascii=False)) + "\n"
        out.write(text.encode("utf-8") if binary else text)  # type: ignore[arg-type]
        out.flush()
    return counts


# ----------------------------------------------------------------------------------- the kinds

def check_instruction(obj: dict) -> dict:
    from posttrain.rewards import verify_row
    from posttrain.rewards.instruction import check_constraint, constraints_from_ifeval, parse_constraints

    response = field(obj, "response", str, "a string")
    if "constraints" in obj:
        key = "constraints"
        make = lambda: parse_constraints(obj["constraints"])  # noqa: E731
    elif "instruction_id_list" in obj:
        key = "instruction_id_list"
        make = lambda: constraints_from_ifeval(obj["instruction_id_list"], obj.get("kwargs"))  # noqa: E731
    else:
        raise BadInput("missing key 'constraints' (or the IFEval 'instruction_id_list' + 'kwargs')", "constraints")
    try:
        constraints = make()
    except ValueError as e:
        raise BadInput(f"{key!r}: {e}", key) from None
    row = {"kind": "instruction", "constraints": constraints}
    if "answer" in obj and obj["answer"] is not None:
        row["answer"] = str(field(obj, "answer", (str, int, float), "a string or a number"))
    if obj.get("prompt") is not None:
        row["prompt"] = field(obj, "prompt", (str, list), "the instruction: a string or chat messages")
    reward, reason = verify_row(response, row)
    held = [{"type": c["type"], "held": check_constraint(response, c)} for c in constraints]
    return {"reward": reward, "reason": reason, "constraints": held}


def _tests_field(obj: dict) -> list[dict]:
    from posttrain.rewards.code_judge import test_problem

    tests = field(obj, "tests", (list, str), "a list of tests or a JSON string of one")
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except (ValueError, RecursionError) as e:
            raise BadInput(f"'tests' is not valid JSON: {str(e)[:200]}", "tests") from None
    if not isinstance(tests, list) or not tests:
        raise BadInput("'tests' must be a non-empty list", "tests")
    for i, test in enumerate(tests):
        if problem := test_problem(test):
            raise BadInput(f"'tests' item {i}: {problem}", "tests")
    return tests


def check_code(obj: dict) -> dict:
    from posttrain.rewards.code_judge import extract_code, run_tests

    response = field(obj, "response", str, "a string")
    tests = _tests_field(obj)
    code = extract_code(response)
    if not code:
        return {"reward": 0.0, "reason": "no_code", "passed": 0, "total": len(tests), "details": []}
    v = run_tests(code, tests)
    return {"reward": v.reward, "reason": v.reason, "passed": v.passed, "total": v.total, "details": v.details}


def _mode_problem(response: str, thinking: bool) -> str:
    from posttrain.chat import THINK_OPEN, parse_response, visible

    parsed = parse_response(response)
    if not parsed.closed:
        return "no closed think block"
    if parsed.think_blocks != 1:
        return f"{parsed.think_blocks} think blocks, expected 1"
    if parsed.closes != 1:
        return f"{parsed.closes} </think> markers, expected 1"
    if not response.lstrip().startswith(THINK_OPEN):
        return "text before the think block"
    if not visible(parsed.answer):
        return "no answer after the think block"
    return "empty reasoning under /think" if thinking else "reasoning under /no_think"


def _format_problem(response: str) -> str:
    from posttrain.chat import THINK_OPEN, parse_response

    answer = parse_response(response).answer
    if THINK_OPEN in answer:
        return "a think marker after the think block"
    count = answer.count(chr(92) + "boxed{")
    if count == 1:
        return "the boxed answer is empty or never closed"
    return f"{count} boxed answers after the think block, expected 1"


def check_format(obj: dict) -> dict:
    from posttrain.rewards.format import format_ok, mode_ok

    response = field(obj, "response", str, "a string")
    thinking = field(obj, "thinking", bool, "true or false")
    mode, fmt = mode_ok(response, thinking), format_ok(response, thinking)
    problem = None if fmt else _mode_problem(response, thinking) if not mode else _format_problem(response)
    reason = "ok" if fmt else "mode_mismatch" if not mode else "format_mismatch"
    return {"reward": float(fmt), "reason": reason, "format_ok": fmt, "mode_ok": mode, "problem": problem}


def check_language(obj: dict) -> dict:
    from posttrain.chat import parse_response
    from posttrain.rewards.instruction import LANGUAGES
    from posttrain.rewards.language import language_share

    response = field(obj, "response", str, "a string")
    language = field(obj, "language", str, f"one of {', '.join(LANGUAGES)}")
    if language not in LANGUAGES:
        raise BadInput(f"'language' must be one of {', '.join(LANGUAGES)}, got {language[:40]!r}", "language")
    reasoning = parse_response(response).reasoning
    share = language_share(reasoning, language) if reasoning else None
    # reward null: the training reward is None there too, and TRL leaves it out of the row's sum
    reason = "measured" if share is not None else "no_reasoning" if not reasoning else "no_words"
    return {"reward": share, "reason": reason}


def check_math(obj: dict) -> dict:
    from posttrain.rewards import verify_row
    from posttrain.rewards.math import extract_final_answer

    response = field(obj, "response", str, "a string")
    gold = field(obj, "answer", (str, int, float), "a string")
    row = {"kind": "math", "answer": gold if isinstance(gold, str) else str(gold)}
    if obj.get("prompt") is not None:
        row["prompt"] = field(obj, "prompt", (str, list), "the question: a string or chat messages")
    reward, reason = verify_row(response, row)
    return {"reward": reward, "reason": reason, "answer": extract_final_answer(response)[0]}


def check_tool(obj: dict) -> dict:
    from posttrain.agents.episodes import episode_of_transcript, render_transcript, tool_fields
    from posttrain.rewards import verify_row

    if "response" not in obj and isinstance(obj.get("messages"), list):
        messages = [m for m in obj["messages"] if isinstance(m, dict)]
        response = render_transcript([m for m in messages if m.get("role") in ("assistant", "tool")])
    else:
        response = field(obj, "response", str, "the episode's transcript (or give \"messages\")")
    field(obj, "environment", str, "the environment's name (built-in or module:Class)")
    row = {"kind": "tool", **tool_fields(obj, BadInput)}   # a row its environment refuses is bad input
    reward, reason = verify_row(response, row)
    episode = episode_of_transcript(response, row)
    return {"reward": reward, "reason": reason, "version": episode.version, "reply": episode.reply,
            "calls": [{k: c[k] for k in ("tool", "arguments", "result")} for c in episode.calls],
            "state": episode.state}


CHECKS: dict[str, Check] = {
    "math": check_math,
    "instruction": check_instruction,
    "code": check_code,
    "format": check_format,
    "language": check_language,
    "tool": check_tool,
}
KINDS = tuple(CHECKS)
