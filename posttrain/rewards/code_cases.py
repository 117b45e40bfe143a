"""The optional parts of a code test case beyond {"input", "output"} and {"call", "expected"}, what
makes them valid, and how a call's result is compared when a case asks for more than `==`.

Parts the child runs (code_sandbox.run_in_sandbox), in one namespace, all of them the data set's
own code (public text, never the expected value):

- "prelude": run before the candidate's code (HumanEval's prompt: its imports and helper functions,
  which a reply that rewrites the whole function still relies on).
- "setup": run after the candidate's code, before the call (MBPP's test_imports and
  test_setup_code: helpers and values the test's call uses).

How a call's result is compared, in the parent (code_judge._judge_call), on decoded builtin values:

- "abs_tol" / "rel_tol" (non-negative numbers): numbers, and numbers inside lists, tuples and dict
  values, compare with math.isclose at these tolerances (`assert math.isclose(f(x), 2.5)`,
  HumanEval's `assert abs(candidate(x) - 2.5) < 1e-6`, EvalPlus's float tolerance); bools, strings
  and everything else stay exact.
- "tuples_as_lists": true: tuples in the result read as lists (data sets that keep their expected
  values as JSON, which has no tuples: APPS / TACO).
- "also": a list of other literals the result may equal instead (APPS / TACO's one-element list
  around a function's return value, which their own judge accepts either way).

A forgeable case, {"assert": "<statements>", "forgeable": true}: an assert program the dataset's
tests hold that cannot be turned into a call and its literal (`assert f(x) != 3`, a loop over
random inputs). It runs in the child after the candidate's code, and passes when it finishes: the
candidate shares that process and can forge the pass (exit, patched builtins, an `__eq__` that
says yes), so such cases are accepted only where a source says so (`forgeable_tests:
run_in_child`), and every place that reports data names them (posttrain.data.code_tests).
"""
from __future__ import annotations

import ast
import math

_CODE_PARTS = ("prelude", "setup")


def _parses(text, mode: str = "exec") -> bool:
    try:
        ast.parse(text, mode=mode)
    except (SyntaxError, ValueError, MemoryError, RecursionError, TypeError):
        return False
    return True


def _tolerance(value) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value >= 0


def parts_problem(test: dict, literal) -> str | None:
    """Why the case's optional parts are unusable, or None; `literal(text)` says whether a value is a
    Python literal the judge can compare with (code_judge._expected's rule)."""
    if test.get("type", "stdin_stdout") != "stdin_stdout" or test.get("fn_name"):
        return ("a function_call case (its type or fn_name says so) would run as a stdin program: give it as "
                "call/expected (verifiable-coding-problems: `tests_from: {format: verifiable_coding}`)")
    for key in _CODE_PARTS:
        if key in test and not (isinstance(test[key], str) and _parses(test[key])):
            return f"{key!r} must be Python code (text that compiles)"
    for key in ("abs_tol", "rel_tol"):
        if key in test and not _tolerance(test[key]):
            return f"{key!r} must be a non-negative number"
    if "tuples_as_lists" in test and not isinstance(test["tuples_as_lists"], bool):
        return "'tuples_as_lists' must be true or false"
    if "also" in test:
        if "call" not in test or not isinstance(test["also"], list) or not all(literal(v) for v in test["also"]):
            return "'also' is a list of other literals a call's result may equal"
    return None


def assert_problem(test: dict) -> str | None:
    """Why a forgeable assert case is unusable, or None."""
    if test.get("forgeable") is not True:
        return ("an assert program runs in the child, where the candidate can forge its pass: mark it "
                "\"forgeable\": true (a source accepts such cases only with `forgeable_tests: run_in_child`)")
    if "call" in test or "input" in test or "output" in test:
        return "an assert case has no call, input or output"
    if not isinstance(test["assert"], str) or not test["assert"].strip() or not _parses(test["assert"]):
        return "'assert' must be Python code (text that compiles)"
    return None


def is_forgeable(test) -> bool:
    return isinstance(test, dict) and "assert" in test


def _lists(value):
    """The value with tuples read as lists (dict values and list items too)."""
    t = type(value)
    if t is tuple or t is list:
        return [_lists(v) for v in value]
    if t is dict:
        return {k: _lists(v) for k, v in value.items()}
    return value


def _number(value) -> bool:
    return type(value) in (int, float)


def _close(got, expected, abs_tol: float, rel_tol: float) -> bool:
    if _number(got) and _number(expected):
        try:
            return math.isclose(got, expected, rel_tol=rel_tol, abs_tol=abs_tol)
        except OverflowError:   # an int too large for a float
            return got == expected
    if type(got) is not type(expected):
        return bool(got == expected)  # 1 == True, 5 == 5.0 already handled; the rest is builtin ==
    if type(got) in (list, tuple):
        return len(got) == len(expected) and all(_close(g, e, abs_tol, rel_tol) for g, e in zip(got, expected))
    if type(got) is dict:
        return got.keys() == expected.keys() and all(_close(got[k], expected[k], abs_tol, rel_tol) for k in got)
    return bool(got == expected)


def matches(got, expected, test: dict, alternatives: list) -> bool:
    """Whether a decoded result equals the expected literal (or one of `alternatives`), as the case
    says to compare: builtin values on both sides, so no candidate code runs here."""
    if test.get("tuples_as_lists"):
        got = _lists(got)
    abs_tol, rel_tol = test.get("abs_tol", 0), test.get("rel_tol", 0)
    for want in [expected, *alternatives]:
        if test.get("tuples_as_lists"):
            want = _lists(want)
        if abs_tol or rel_tol:
            if _close(got, want, abs_tol, rel_tol):
                return True
        elif bool(got == want):
            return True
    return False
