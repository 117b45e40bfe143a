"""Judging a candidate Python program against test cases, and the code reward built on it.

One sandboxed child interpreter per test case (as competitive-programming judges do: a crash, a
hang or a poisoned global in one test cannot leak into the next); reward = tests passed.  What
isolates the child is code_sandbox.py.

Test cases. A row's `tests` is a list of cases, each {"input", "output"} (stdin/stdout) or {"call",
"expected"} (a Python expression and the literal it must equal). A case with `"hidden": true` is held
out: the prompt may show only the others (`visible_tests`), while the reward judges every case, so a
program that special-cases the shown tests fails the held-out ones. Without held-out tests
(`has_hidden_tests` False) special-casing the shown tests earns full reward; data checks say so.
A case may also carry the data set's own code run around the candidate's ("prelude", "setup"),
ask for a tolerance or alternatives in the comparison, or be a forgeable assert program, accepted
only where a source opts in: code_cases.py.

Call results. The child evaluates the call and writes its value as one record on a pipe of its
own: a length line, then "=" and the value in a tagged token form that only plain literals have
(None, bool, int, float, complex, str, bytes and exact list, tuple, set, frozenset, dict - plus the
stdlib's OrderedDict, defaultdict and Counter, as dicts), or "!" and why the value is not one (a
user class, a subclass of int with its own __eq__, a generator...). The encoder checks exact types
(`type(x) is int`) with functions bound before the candidate ran, and walks containers through the
builtin types' own methods, so no method of the candidate's runs while it encodes. The parent
decodes the record into builtin values (bounded size and depth, no hash floods) and compares them
with `==` against `ast.literal_eval(expected)`, as the datasets' own `assert f(x) == expected` does
(5 == 5.0 and True == 1 pass; [1, 2] != (1, 2)), without ever running the candidate's code.

Why a forged record earns nothing. The candidate shares the child's process with the encoder, so
nothing in that process is beyond its reach: it can walk the stack to the encoder, patch it, or
find the result pipe and write a record of its own, then exit. The design does not rest on
stopping that. A record only claims "the call returned this plain literal", and the candidate
could as well have returned that literal; what a pass needs is the expected value, and that never
enters the child: the parent keeps it (the child gets the code and the call, or stdin), an
isolated sandbox holds nothing of the data set, the parent's memory or its files, and held-out
cases are never shown. So forging is worth no more than answering, and the held-out cases must be
answered right, however the answer is delivered. What the parent itself must survive is checked
there: a record that is not exactly one well-formed frame, is oversized or too deep, or is built
to make hashing quadratic fails the test at once. Stdin/stdout tests are compared in the parent
the same way, on output produced without knowing what was expected. A call that itself compares
(`f(3) == 9`) would put the answer in the child and run the candidate's `==` there, so such a case
is refused as a bad test: the call is the computation, the answer goes in `expected`.
"""
from __future__ import annotations

import ast
import json
import logging
import os
import re
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

from posttrain.rewards import code_cases
from posttrain.rewards.code_sandbox import (
    ChildRun, SandboxLimits, how_to_isolate, run_in_sandbox, sandbox_isolation, unisolated_allowed,
)
from posttrain.rewards.sandbox_child import MAX_RESULT_DEPTH, SETUP_EXIT, VIOLATION_EXIT

_log = logging.getLogger(__name__)
_REFUSAL_LOGGED = threading.Event()  # the refusal to run unisolated code is logged once per process
_MAX_TOKENS = 1_000_000
# Distinct decoded keys sharing one hash value: more than this is a crafted collision chain, which
# makes building the set or dict quadratic in the parent.
_MAX_SAME_HASH = 8


@dataclass(frozen=True)
class SandboxVerdict:
    reward: float
    reason: str  # pass | wrong_answer | runtime_error | timeout | cpu_limit | memory_limit |
    #              output_limit | file_limit | violation | budget | no_tests | no_code |
    #              code_too_long | bad_test | no_isolation | sandbox_error
    passed: int
    total: int
    details: list[str] = field(default_factory=list)


_ATOMS = (type(None), bool, int, float, complex, str, bytes)
_CONTAINERS = (list, tuple, set, frozenset, dict)


def _literal_only(value, depth: int = 0) -> bool:
    """Whether `value` is made of plain literals only (exact types), containers nested less than
    MAX_RESULT_DEPTH deep (what a record can carry)."""
    t = type(value)
    if t in _ATOMS:
        return True
    if t not in _CONTAINERS or depth >= MAX_RESULT_DEPTH:
        return False
    if t is dict:
        return all(_literal_only(k, depth + 1) and _literal_only(v, depth + 1) for k, v in value.items())
    return all(_literal_only(v, depth + 1) for v in value)


def _expected(test: dict) -> tuple[bool, object]:
    """(ok, value) of a call test's expected literal: Python literal text, or a (JSON) value as is."""
    expected = test.get("expected")
    if isinstance(expected, str):
        try:
            expected = ast.literal_eval(expected.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return False, None
    try:
        return _literal_only(expected), expected
    except RecursionError:
        return False, None


def _compares(call: str) -> bool | None:
    """Whether the call expression compares something it computed (None: not an expression)."""
    try:
        tree = ast.parse(call, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(n, ast.Call) for n in ast.walk(node)):
            return True
    return False


class _BadRecord(ValueError):
    pass


def _build(tag: bytes, items: list):
    if tag == b"l":
        return items
    if tag == b"t":
        return tuple(items)
    keys = items[0::2] if tag == b"d" else items
    seen: dict[int, int] = {}
    for key in keys:  # unhashable (a list in a set) raises TypeError: a bad record
        h = hash(key)
        seen[h] = seen.get(h, 0) + 1
        if seen[h] > _MAX_SAME_HASH:
            raise _BadRecord("crafted hash collisions")
    if tag == b"d":
        return dict(zip(items[0::2], items[1::2]))
    return set(items) if tag == b"e" else frozenset(items)


def _atom(tag: bytes, rest: bytes):
    if tag in (b"N", b"T", b"F"):
        if rest:
            raise _BadRecord("bad token")
        return {b"N": None, b"T": True, b"F": False}[tag]
    if tag == b"i":
        return int(rest, 16)
    if tag == b"f":
        return float.fromhex(rest.decode("ascii"))
    if tag == b"c":
        real, imag = rest.split(b",")
        return complex(float.fromhex(real.decode("ascii")), float.fromhex(imag.decode("ascii")))
    if tag == b"s":
        return bytes.fromhex(rest.decode("ascii")).decode("utf-8", "surrogatepass")
    if tag == b"b":
        return bytes.fromhex(rest.decode("ascii"))
    raise _BadRecord("bad token")


def _decode_tokens(body: bytes):
    """The value of a record's token form (pre-order; containers say how many items follow)."""
    tokens = body.split(b" ")
    if len(tokens) > _MAX_TOKENS:
        raise _BadRecord("too many items")
    stack: list[list] = []  # [tag, items still to come, items]
    for pos, tok in enumerate(tokens):
        tag, rest = tok[:1], tok[1:]
        if tag in (b"l", b"t", b"e", b"z", b"d"):
            if not rest.isdigit() or len(rest) > 7:
                raise _BadRecord("bad count")
            n = int(rest) * (2 if tag == b"d" else 1)
            if n:
                if len(stack) >= MAX_RESULT_DEPTH:
                    raise _BadRecord("nested too deep")
                stack.append([tag, n, []])
                continue
            value = _build(tag, [])
        else:
            value = _atom(tag, rest)
        while stack:
            top = stack[-1]
            top[2].append(value)
            top[1] -= 1
            if top[1]:
                break
            stack.pop()
            value = _build(top[0], top[2])
        if not stack:
            if pos != len(tokens) - 1:
                raise _BadRecord("trailing items")
            return value
    raise _BadRecord("truncated")


def decode_result(data: bytes) -> tuple[bool, object]:
    """(True, value) for a well-formed record of a literal, else (False, why). Never raises.

    A record is `<decimal length of the body>\\n<body>`, the pipe holding exactly one; the body is
    "!" and why the value is not a literal, or "=" and space-separated tokens in pre-order: N, T,
    F; i<hex int>, f<float.hex>, c<float.hex>,<float.hex>, s<hex of UTF-8 (surrogatepass)>,
    b<hex of bytes>; and l<n>, t<n>, e<n>, z<n> (list, tuple, set, frozenset of the n values that
    follow), d<n> (dict of the n key, value pairs that follow)."""
    head, sep, body = data.partition(b"\n")
    if not sep or not head.isdigit() or len(head) > 12 or int(head) != len(body) or not body:
        return False, "no result" if not data else "malformed result record"
    if body[:1] == b"!":
        return False, body[1:201].decode("utf-8", "replace")
    if body[:1] != b"=":
        return False, "malformed result record"
    try:
        return True, _decode_tokens(body[1:])
    except _BadRecord as e:
        return False, f"malformed result record ({e})"
    except (ValueError, TypeError, UnicodeDecodeError, OverflowError, MemoryError, RecursionError):
        return False, "malformed result record"


def _show(value) -> str:
    """The start of a decoded value's repr, for the verdict's details."""
    try:
        return repr(value)[:80]
    except ValueError:  # an int past str()'s digit limit, possibly nested
        return f"<int of {value.bit_length()} bits>" if type(value) is int else "<value too large to show>"
    except RecursionError:
        return "<value nested too deep to show>"


def _judge_call(run: ChildRun, test: dict) -> tuple[bool, str]:
    ok, got = decode_result(run.result)
    if not ok:
        if got == "no result":
            return False, "runtime_error: no result"
        return False, f"wrong_answer: {test['call'][:80]} -> <{str(got)[:80]}>"
    _, expected = _expected(test)
    also = [_expected({"expected": v})[1] for v in test.get("also", [])]
    try:
        same = code_cases.matches(got, expected, test, also)  # builtin values on both sides: no candidate code runs
    except (RecursionError, MemoryError):
        same = False
    if same:
        return True, "pass"
    return False, f"wrong_answer: {test['call']} -> {_show(got)!r}, expected {str(test['expected'])[:80]!r}"


def _judge(run: ChildRun, test: dict, limits: SandboxLimits) -> tuple[bool, str]:
    """(passed, reason) for one finished child."""
    err = run.stderr.decode("utf-8", "replace")
    if run.output_exceeded:
        return False, f"output_limit: more than {limits.output_bytes} bytes"
    if run.timed_out:
        return False, f"timeout: wall {run.wall_s:.2f}s"
    rc = run.returncode
    if rc == VIOLATION_EXIT and "sandbox violation:" in err:
        return False, "violation: " + err.rsplit("sandbox violation:", 1)[1].strip()[:200]
    if rc == SETUP_EXIT and "sandbox setup failed:" in err:
        return False, "sandbox_error: " + err.rsplit("sandbox setup failed:", 1)[1].strip()[:200]
    if rc == 1 and err.startswith("bwrap: "):
        return False, "sandbox_error: " + err.strip().splitlines()[0][:200]
    if rc in (-signal.SIGXCPU, -signal.SIGKILL) and run.wall_s < limits.wall_s:
        return False, f"cpu_limit: {limits.cpu_s}s"
    if rc == -signal.SIGXFSZ:
        return False, f"file_limit: {limits.file_bytes} bytes"
    if rc != 0:
        tail = err.strip().splitlines()[-1] if err.strip() else f"exit {rc}"
        if "MemoryError" in err:
            return False, "memory_limit: " + tail[:200]
        if "File too large" in err or "No space left" in err:
            return False, "file_limit: " + tail[:200]
        return False, "runtime_error: " + tail[:200]
    if "call" in test:
        return _judge_call(run, test)
    if "assert" in test:  # a forgeable assert program (code_cases): it ran to its end
        ok, got = decode_result(run.result)
        return (True, "pass") if ok and got is True else (False, "wrong_answer: the assert program did not finish")
    got, expected = run.stdout.decode("utf-8", "replace").strip(), str(test["output"]).strip()
    ok = got == expected
    return ok, "pass" if ok else f"wrong_answer: got {got[:80]!r}, expected {expected[:80]!r}"


def test_problem(test) -> str | None:
    """Why `test` is not a usable case, or None: it needs input/output, or a call expression and
    the literal it must equal; `hidden`, where present, is a boolean; the optional parts and the
    forgeable assert case are code_cases.py's."""
    if not isinstance(test, dict):
        return "a test is an object"
    if "hidden" in test and not isinstance(test["hidden"], bool):
        return "'hidden' must be true or false"
    problem = code_cases.parts_problem(test, lambda v: _expected({"expected": v})[0])
    if problem or "assert" in test:
        return problem or code_cases.assert_problem(test)
    if "call" not in test:
        return None if "output" in test else "a test needs input/output or call/expected"
    if not isinstance(test["call"], str) or "expected" not in test:
        return "a call test needs a call string and its expected value"
    compares = _compares(test["call"])
    if compares is None:
        return "the call is not a Python expression"
    if compares:
        return "the call compares a computed value itself: give the value as the call, the answer as expected"
    if not _expected(test)[0]:
        return "'expected' is not a Python literal (nothing a program returns could be judged equal to it)"
    return None


def is_valid_test(test) -> bool:
    """A test has input/output, or a call expression and its expected literal (see test_problem)."""
    return test_problem(test) is None


def _cases(value) -> list:
    try:
        cases = tests_of(value)
    except (ValueError, TypeError, RecursionError):
        return []
    return cases if isinstance(cases, list) else []


def visible_tests(value) -> list:
    """The cases of a row's `tests` (a list, or its JSON text) that a prompt may show: every case
    not marked `"hidden": true`."""
    return [t for t in _cases(value) if not (isinstance(t, dict) and t.get("hidden") is True)]


def hidden_tests(value) -> list:
    """The held-out cases of a row's `tests`: judged by the reward, never shown."""
    return [t for t in _cases(value) if isinstance(t, dict) and t.get("hidden") is True]


def has_hidden_tests(value) -> bool:
    """Whether a row's tests hold any case out of the prompt. Without one, a program that
    special-cases the shown tests earns full reward. Never raises."""
    return bool(hidden_tests(value))


def run_tests(code: str, tests: list[dict], *, mode: Literal["all", "fraction"] = "all",
              limits: SandboxLimits = SandboxLimits()) -> SandboxVerdict:
    """Run `code` once per test case, held-out ones included. mode="all": reward 1.0 only if every
    test passes (stops at the first failure); mode="fraction": the share passed. Never raises."""
    try:
        return _run_tests(code, tests, mode, limits)
    except Exception as e:  # noqa: BLE001 - a verifier scores, it does not crash the trainer
        total = len(tests) if isinstance(tests, list) else 0
        return SandboxVerdict(0.0, "sandbox_error", 0, total, [f"{type(e).__name__}: {e}"])


def _run_tests(code, tests, mode, limits: SandboxLimits) -> SandboxVerdict:
    start = time.monotonic()
    if not isinstance(tests, list) or not tests:
        return SandboxVerdict(0.0, "no_tests", 0, 0, [])
    total = len(tests)
    if not isinstance(code, str) or not code.strip():
        return SandboxVerdict(0.0, "no_code", 0, total, [])
    if len(code) > limits.max_code_chars or "\x00" in code:
        return SandboxVerdict(0.0, "code_too_long" if "\x00" not in code else "no_code", 0, total, [])
    for i, test in enumerate(tests):
        problem = test_problem(test)
        if problem:
            return SandboxVerdict(0.0, "bad_test", 0, total, [f"test {i}: {problem}"])
    isolation = sandbox_isolation(limits.isolation)
    if isolation == "none" and limits.isolation == "auto" and not unisolated_allowed():
        return SandboxVerdict(0.0, "no_isolation", 0, total, [how_to_isolate()])
    passed, details, first_failure = 0, [], None
    for i, test in enumerate(tests):
        now = time.monotonic()
        if now - start >= limits.total_wall_s:
            reason = f"budget: {limits.total_wall_s}s used before test {i}"
        else:
            deadline = min(now + limits.wall_s, start + limits.total_wall_s)
            parts = {k: test.get(k) for k in ("prelude", "setup")} | {"script": test.get("assert")}
            run = run_in_sandbox(isolation, code, test.get("call"), str(test.get("input", "")), limits, deadline, parts)
            ok, reason = _judge(run, test, limits)
            if ok:
                passed += 1
        details.append(f"test {i}: {reason}")
        if reason != "pass" and first_failure is None:
            first_failure = reason.split(":", 1)[0]
            if mode == "all":
                break
    reward = float(passed == total) if mode == "all" else passed / total
    return SandboxVerdict(reward, first_failure or "pass", passed, total, details)


_FENCE_RE = re.compile(r"```(?:python|py|python3)[ \t]*\n(.*?)```", re.S | re.I)


def extract_code(response: str) -> str | None:
    """The last ```python fenced block of the answer part (after </think>); None if there is none or
    the response is still thinking."""
    from posttrain.chat import parse_response

    parsed = parse_response(response)
    if parsed.think_blocks and not parsed.closed:
        return None
    blocks = _FENCE_RE.findall(parsed.answer)
    return blocks[-1] if blocks else None


def tests_of(value) -> list[dict] | None:
    """A row's test cases (the list, or its JSON text); None when the row has none."""
    if value is None or value == "" or value == []:
        return None
    return json.loads(value) if isinstance(value, str) else value


def code_execution(completions, tests, **kwargs) -> list[float | None]:
    """All-tests-pass reward (DeepSeek-R1's rule-based code reward: compile and run against test
    cases). Rows without tests → None. Completions run concurrently (each child mostly waits).
    Without OS isolation (and no `require_isolation(allow_unisolated=True)`) nothing runs and every
    row with tests scores 0, logged once; stages call require_isolation at start to fail early."""
    from posttrain.rewards import completion_text

    def score(item) -> float | None:
        completion, row_tests = item
        try:
            cases = tests_of(row_tests)
        except (ValueError, RecursionError):
            return 0.0
        if cases is None:
            return None
        code = extract_code(completion_text(completion))
        if not code:
            return 0.0
        verdict = run_tests(code, cases)
        if verdict.reason == "no_isolation" and not _REFUSAL_LOGGED.is_set():
            _REFUSAL_LOGGED.set()
            _log.error("code reward refused to run untrusted code (scored 0): %s", verdict.details[0])
        return verdict.reward

    items = list(zip(completions, tests))
    workers = max(1, min(4, os.cpu_count() or 1, len(items)))
    if workers == 1:
        return [score(it) for it in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(score, items))
