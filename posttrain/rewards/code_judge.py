"""Judging a candidate Python program against test cases, and the code reward built on it.

One sandboxed child interpreter per test case (as competitive-programming judges do: a crash, a
hang or a poisoned global in one test cannot leak into the next); reward = tests passed.  What
isolates the child is code_sandbox.py.

Call tests compare by value: `ast.literal_eval(repr(result)) == ast.literal_eval(expected)` when
both are Python literals (so 5 == 5.0, but [1, 2] != (1, 2)), else the repr string against the
expected string. The child prints the repr after a per-run nonce; a candidate that deliberately
walks the stack into the harness (sys._getframe, which the stdlib itself needs) could read the nonce
and forge a result. Stdin/stdout tests are compared in the parent and cannot be forged that way.
"""
from __future__ import annotations

import ast
import json
import logging
import os
import re
import secrets
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

from posttrain.rewards.code_sandbox import (
    ChildRun, SandboxLimits, how_to_isolate, run_in_sandbox, sandbox_isolation, unisolated_allowed,
)
from posttrain.rewards.sandbox_child import SETUP_EXIT, VIOLATION_EXIT

_log = logging.getLogger(__name__)
_REFUSAL_LOGGED = threading.Event()  # the refusal to run unisolated code is logged once per process


@dataclass(frozen=True)
class SandboxVerdict:
    reward: float
    reason: str  # pass | wrong_answer | runtime_error | timeout | cpu_limit | memory_limit |
    #              output_limit | file_limit | violation | budget | no_tests | no_code |
    #              code_too_long | bad_test | no_isolation | sandbox_error
    passed: int
    total: int
    details: list[str] = field(default_factory=list)


def _literal(text: str):
    try:
        return True, ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def _same_value(got: str, expected: str) -> bool:
    """Literal equality, with int/float interchangeable (5 == 5.0) but no other cross-type matches
    (True != 1, [1, 2] != (1, 2)); non-literal reprs compare as strings."""
    ok_g, g = _literal(got)
    ok_e, e = _literal(expected)
    if not (ok_g and ok_e):
        return got.strip() == expected.strip()
    numbers = (int, float)
    same_kind = type(g) is type(e) or (type(g) in numbers and type(e) in numbers)
    try:
        return bool(same_kind and g == e)
    except Exception:  # noqa: BLE001 - comparing arbitrary literals must not raise
        return False


def _judge(run: ChildRun, test: dict, nonce: str, limits: SandboxLimits) -> tuple[bool, str]:
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
    stdout = run.stdout.decode("utf-8", "replace")
    if "call" in test:
        marker = stdout.rfind(nonce)
        if marker < 0:
            return False, "runtime_error: no result"
        got, expected = stdout[marker + len(nonce):].strip(), str(test["expected"])
        ok = _same_value(got, expected)
        return ok, "pass" if ok else f"wrong_answer: {test['call']} -> {got[:80]!r}, expected {expected[:80]!r}"
    got, expected = stdout.strip(), str(test["output"]).strip()
    ok = got == expected
    return ok, "pass" if ok else f"wrong_answer: got {got[:80]!r}, expected {expected[:80]!r}"


def is_valid_test(test) -> bool:
    """A test has input/output, or a call string and its expected value."""
    if not isinstance(test, dict):
        return False
    if "call" in test:
        return isinstance(test["call"], str) and "expected" in test
    return "output" in test


def run_tests(code: str, tests: list[dict], *, mode: Literal["all", "fraction"] = "all",
              limits: SandboxLimits = SandboxLimits()) -> SandboxVerdict:
    """Run `code` once per test case. mode="all": reward 1.0 only if every test passes (stops at the
    first failure); mode="fraction": the share passed. Never raises."""
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
    if not all(is_valid_test(t) for t in tests):
        return SandboxVerdict(0.0, "bad_test", 0, total, ["a test needs input/output or call/expected"])
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
            nonce = "@@result-" + secrets.token_hex(8) + "@@"
            run = run_in_sandbox(isolation, code, test.get("call"), str(test.get("input", "")), nonce, limits,
                                 deadline)
            ok, reason = _judge(run, test, nonce, limits)
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
        except ValueError:
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
