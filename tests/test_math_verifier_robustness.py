"""Robustness of posttrain.rewards.math: long and adversarial inputs, CAS bombs, the integer fast
path, the sympy worker (real timeout, respawn, threads), the JSON-lines stream, false positives
found by adversarial probing, the one-deadline contract and the CLI in a real process (the golden
table is tests/test_math_verifier.py)."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading

import pytest
from sympy_worker import wait_worker_ready

from posttrain.rewards.math import algebra, compare, extract, limits, values, verify, worker
from posttrain.rewards.math import (
    GoldAnswerError,
    Verdict,
    check_gold,
    extract_final_answer,
    verify_math,
    verify_stream,
)


def B(x: str) -> str:
    return f"Thus the final answer is $\\boxed{{{x}}}$."


M, X = "match", "mismatch"

# --- long and adversarial inputs ------------------------------------------------------------------
def test_long_response_20k_chars():
    think = "<think>" + ("Let me compute step by step. 7+8=15, carry the 1. " * 400) + "</think>"
    assert len(think) > 20_000
    assert verify_math(think + "So \\boxed{85}.", "85") == Verdict(1.0, "match", "85")
    assert verify_math(think + "So \\boxed{84}.", "85").reason == "mismatch"
    assert verify_math(think[:-len("</think>")], "85").reason == "no_box"


def test_huge_response_one_box():
    assert verify_math("x" * 2_000_000 + "\\boxed{3}", "3").reward == 1.0


ADVERSARIAL = [
    "9^{9^{9^9}}", "100000!", "10^{10^{10}}", "(" * 500 + "1" + ")" * 500, "{" * 1000 + "1" + "}" * 1000,
    "2^2^2^2^2^2", "\\sin(10^{10^{10}})", "(x+1)^{1000}", "(x+y+z+w)^{40}", "2^{39999}", "1000!!!",
    "99999999999999999999999^{99999999999}", "\\frac{" * 200 + "1}{2}" * 200, "1+" * 600 + "1",
    "\\exp(\\exp(\\exp(\\exp(100))))", "e^{e^{e^{e^{e^{10}}}}}", "x^{x^{x^{x}}}", "\\binom{20000}{10000}",
    "\\sqrt{12345678901234567890123456789}", "\\underbrace{9^{9^{9}}}", "7" * 5000,
]


@pytest.mark.parametrize("answer", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
@pytest.mark.parametrize("gold", ["1", "x+1", "\\sin(x)"])
def test_adversarial_scores_zero(answer, gold):
    v = verify_math(B(answer), gold)
    assert v.reward == 0.0
    assert v.reason in ("too_expensive", "timeout", "mismatch", "unparsable_response")


@pytest.mark.parametrize("answer", ["9^{9^{9^9}}", "100000!", "10^{10^{10}}", "(" * 500 + "1" + ")" * 500,
                                    "1" * 100_000])
def test_cas_bombs_are_rejected_before_sympy(answer, monkeypatch):
    # Asserted by behaviour, not a stopwatch (a loaded machine made the 0.05 s bound flaky): the
    # sympy worker must never be asked about these.
    def no_cas(*args):
        raise AssertionError("the sympy worker was asked")

    monkeypatch.setattr(worker.WORKER, "equal", no_cas)
    assert verify_math(B(answer), "1").reason == "too_expensive"


# --- fast path (its speed is measured by bench/verifiers.py) ---------------------------------------
def test_integer_fast_path_never_parses(monkeypatch):
    def no_parse(*args):
        raise AssertionError("the fast path parsed the answer")

    monkeypatch.setattr(verify, "parse_value", no_parse)
    monkeypatch.setattr(verify, "clean_answer", no_parse)
    r = "<think>7+8=15</think>The answer is \\boxed{85}."
    assert verify_math(r, "85") == Verdict(1.0, "match", "85")
    assert verify_math(r, "86") == Verdict(0.0, "mismatch", "85")


def test_main_process_never_imports_sympy():
    code = (
        "import sys\n"
        "from posttrain.rewards.math import verify_math\n"
        "assert verify_math('\\\\boxed{\\\\sqrt{8}}', '2\\\\sqrt{2}').reward == 1.0\n"
        "assert verify_math('\\\\boxed{x^2+2x+1}', '(x+1)^2').reward == 1.0\n"
        "assert verify_math('\\\\boxed{\\\\sin(\\\\pi/6)}', '\\\\cos(\\\\pi/3)').reason in ('match', 'timeout')\n"
        "assert 'sympy' not in sys.modules, 'sympy imported in the caller'\n"
        "print('ok')\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


# --- sympy worker: real timeout, respawn, off the main thread -----------------------------------
def test_worker_timeout_kills_and_respawns(monkeypatch):
    wait_worker_ready()
    old_pid = worker.WORKER.proc.pid
    monkeypatch.setattr(worker, "WORKER_CALL_S", 0.001)
    v = verify_math(B("\\sin^2 q + \\cos^2 q"), "1")  # needs sympy.simplify: many ms (and is asked first here)
    assert v.reason == "timeout" and v.reward == 0.0
    monkeypatch.setattr(worker, "WORKER_CALL_S", 0.6)
    wait_worker_ready()
    assert worker.WORKER.proc.pid != old_pid  # killed and replaced


def test_worker_works_off_main_thread():
    wait_worker_ready()
    results = []
    t = threading.Thread(target=lambda: results.append(verify_math(B("\\sin(\\pi/6)"), "\\cos(\\pi/3)")))
    t.start()
    t.join(5)
    assert results and results[0].reason == "match"


# --- stream --------------------------------------------------------------------------------------
class _FlushRecorder(io.StringIO):
    def __init__(self):
        super().__init__()
        self.flushed_at: list[int] = []

    def flush(self):
        self.flushed_at.append(self.getvalue().count("\n"))
        super().flush()


def test_verify_stream_order_flush_and_bad_lines():
    lines = [
        json.dumps({"response": "\\boxed{5}", "answer": "5"}),
        "this is not json",
        json.dumps({"response": "\\boxed{\\frac12}", "answer": "0.5"}),
        json.dumps(["not", "an", "object"]),
        json.dumps({"response": "\\boxed{5}"}),
        json.dumps({"response": 7, "answer": "7"}),
        json.dumps({"response": "答案是\\boxed{85}。", "answer": "85"}, ensure_ascii=False),
        json.dumps({"response": "\\boxed{4}", "answer": "5"}),
    ]
    out = _FlushRecorder()
    verify_stream(iter(lines), out)
    recs = [json.loads(x) for x in out.getvalue().splitlines()]
    assert len(recs) == len(lines)
    assert recs[0] == {"reward": 1.0, "reason": "match", "answer": "5"}
    assert recs[1]["reason"] == "bad_input" and recs[1]["reward"] == 0.0 and recs[1]["error"].startswith("line 2:")
    assert recs[2] == {"reward": 1.0, "reason": "match", "answer": "\\frac12"}
    assert recs[3]["reason"] == "bad_input" and recs[3]["error"].startswith("line 4:")
    assert recs[4]["reason"] == "bad_input" and "answer" in recs[4]["error"]
    assert recs[5]["reason"] == "bad_input" and recs[5]["error"].startswith("line 6:")
    assert recs[6] == {"reward": 1.0, "reason": "match", "answer": "85"}
    assert recs[7] == {"reward": 0.0, "reason": "mismatch", "answer": "4"}
    assert out.flushed_at[: len(lines)] == list(range(1, len(lines) + 1))  # flushed after every line


def stream_cases(n: int) -> list[dict]:
    """n stream lines of six kinds (bench/verifiers.py times the same mix)."""
    cases = []
    for i in range(n):
        kind = i % 6
        if kind == 0:
            cases.append({"response": f"<think>..</think>\\boxed{{{i}}}", "answer": str(i)})
        elif kind == 1:
            cases.append({"response": f"\\boxed{{\\frac{{{i}}}{{{i + 1}}}}}", "answer": f"{i}/{i + 1}"})
        elif kind == 2:
            cases.append({"response": f"\\boxed{{x^2+{2 * i}x+{i * i}}}", "answer": f"(x+{i})^2"})
        elif kind == 3:
            cases.append({"response": f"\\boxed{{{i}.333}}", "answer": f"\\frac{{{3 * i + 1}}}{{3}}"})
        elif kind == 4:
            cases.append({"response": "\\boxed{9^{9^{9^9}}}", "answer": "1"})
        else:
            cases.append({"response": f"\\boxed{{[{i}, {i + 1})}}", "answer": f"[{i},{i + 1})"})
    return cases


def test_verify_stream_hundreds_of_cases():
    cases = stream_cases(300)
    out = io.StringIO()
    verify_stream((json.dumps(c) for c in cases), out)
    recs = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [r["reward"] for r in recs] == [0.0 if i % 6 in (3, 4) else 1.0 for i in range(300)]


def test_worker_kept_when_caller_budget_runs_out():
    wait_worker_ready()
    pid = worker.WORKER.proc.pid
    with pytest.raises(limits.Timeout):
        sin2 = ["^", ["f", "sin", ["s", "x"]], ["n", 2, 1]]
        cos2 = ["^", ["f", "cos", ["s", "x"]], ["n", 2, 1]]
        worker.WORKER.equal(["+", sin2, cos2], ["n", 1, 1], limits.Deadline(0.001))  # needs simplify: ms
    assert worker.WORKER.proc.pid == pid  # not killed: its answer is drained by the next request
    assert verify_math(B("\\cos(\\pi)"), "-\\sin(\\pi/2)").reason == "match"
    assert worker.WORKER.proc.pid == pid and worker.WORKER.stale_since is None


# --- false positives found by adversarial probing: reward 0 however the answer is wrapped ----------
WRAPS = {
    "box": lambda x: f"\\boxed{{{x}}}",
    "sentence": lambda x: f"The final answer is $\\boxed{{{x}}}$.",
    "after_think": lambda x: f"<think>so it is {x}</think>Therefore \\( \\boxed{{{x}}} \\)",
}

FALSE_POSITIVES = [  # (id, answer, gold, reason)
    # a unit word or factor that changes the value is read with it: a different value
    ("thousand", "5 thousand", "5", X),
    ("text_hundred", "5 \\text{ hundred}", "5", X),
    ("text_k", "5 \\text{k}", "5", X),
    ("squared", "5 squared", "5", X),
    ("cubed", "3 cubed", "3", X),
    ("halves", "3 halves", "3", X),
    ("factorial_word", "5 factorial", "5", X),
    ("dozen", "2 dozen", "2", X),
    # undefined arithmetic with infinity is no value
    ("inf_minus_inf", "\\infty-\\infty", "0", "unparsable_response"),
    ("zero_times_inf", "0\\cdot\\infty", "0", "unparsable_response"),
    ("inf_over_inf", "\\frac{\\infty}{\\infty}", "1", "unparsable_response"),
    ("inf_to_zero", "\\infty^0", "1", "unparsable_response"),
    # an equation chain with two different values is a hedge
    ("chain", "x = 4 = 3", "3", "hedged"),
    ("chain_no_name", "4 = 3 = 3", "3", "hedged"),
    # a qualified value is not one exact value
    ("or_more", "3 \\text{ or more}", "3", "unparsable_response"),
    ("at_least_text", "3 \\text{ at least}", "3", "unparsable_response"),
    # an exponent-mark number is a number: 1e0 is 1, not 1 * e * 0
    ("exp_mark", "1e0", "0", X),
    # subscripts are not digits; a run of superscripts is one exponent
    ("subscript_digit", "10\u2082", "102", "unparsable_response"),
    ("superscript_run", "2\u00b9\u2070", "2", X),
]


@pytest.mark.parametrize("wrap", list(WRAPS))
@pytest.mark.parametrize("answer,gold,reason", [c[1:] for c in FALSE_POSITIVES], ids=[c[0] for c in FALSE_POSITIVES])
def test_false_positives_score_zero(answer, gold, reason, wrap):
    v = verify_math(WRAPS[wrap](answer), gold)
    assert (v.reward, v.reason) == (0.0, reason), v
    assert v.answer == answer


# number names and exponent marks write a number; squared, cubed, factorial and dozen are operations,
# compared by value only against a gold that is itself not a plain number (`NumeralRule`)
@pytest.mark.parametrize("answer,gold", [
    ("5 thousand", "5000"), ("5 \\text{ hundred}", "500"), ("5 \\text{k}", "5000"), ("5 squared", "5^2"),
    ("3 cubed", "3^3"), ("3 halves", "\\frac{3}{2}"), ("5 factorial", "5!"), ("2 dozen", "2 \\cdot 12"),
    ("5 hundred thousand", "500000"), ("1e0", "1"), ("2.5E3", "2500"), ("1e-3", "0.001"),
    ("2\u00b9\u2070", "2^{10}"), ("10\u207b\u00b3", "0.001"),
])
def test_value_words_and_marks_are_read_as_values(answer, gold):
    assert verify_math(B(answer), gold) == Verdict(1.0, M, answer)


@pytest.mark.parametrize("answer,gold", [
    ("5 \\text{ cm}", "5"), ("5 cm squared", "5"), ("6 \\text{ meters per second}", "6"), ("300 \\text{K}", "300"),
    ("2 k", "2k"), ("2e", "2e"), ("2e - 1", "-1+2 e"), ("x_{1}+x\u2082", "x_1+x_2"), ("(-\\infty, 3]", "(-\\infty,3]"),
    ("-\\infty", "-\\infty"), ("x = 1 + 2 = 3", "3"), ("x = y = 3", "3"), ("f(2) = 2^2 + 1 = 5", "5"),
])
def test_fixes_keep_right_answers(answer, gold):
    assert verify_math(B(answer), gold).reason == M


@pytest.mark.parametrize("gold", ["\\infty - \\infty", "x = 4 = 3", "3 \\text{ or more}", "10\u2082"])
def test_gold_with_no_single_value_is_rejected(gold):
    with pytest.raises(GoldAnswerError):
        check_gold(gold)


# --- one deadline covers the whole call -------------------------------------------------------------
def _equal_polynomial_boxes(n: int) -> str:
    """n boxes, each a different spelling of (a+...+f)^6: the hedge check must expand every one."""
    return " ".join(f"\\boxed{{(a+b+c+d+e+f)^{{6}}+{i}-{i}}}" for i in range(n))


@pytest.mark.parametrize("response", [
    _equal_polynomial_boxes(2000),  # ~0.1 s of exact arithmetic per box: minutes without a deadline
    _equal_polynomial_boxes(30_000),  # a 1 MB response
], ids=["2000_boxes", "1MB"])
def test_deadline_covers_every_box(response):
    assert verify_math(response, "(a+b+c+d+e+f)^6").reason == "timeout"
    assert extract_final_answer(response) == (None, "timeout")


def test_deadline_is_per_call_and_never_cached(monkeypatch):
    monkeypatch.setattr(verify, "TIME_BUDGET_S", 0.0)
    assert verify_math(B("x^2+14x+49"), "(x+7)^2") == Verdict(0.0, "timeout", None)
    monkeypatch.setattr(verify, "TIME_BUDGET_S", 0.85)
    assert verify_math(B("x^2+14x+49"), "(x+7)^2").reason == M  # the gold parse that timed out is redone


@pytest.mark.parametrize("step", [
    lambda: extract.find_boxes("\\boxed{1}"),
    lambda: extract.match_brace("{" * 5000 + "}" * 5000, 0),
    lambda: values.parse_value("x^2+1", True),
    lambda: algebra.canonical_form(["+", ["s", "x"], ["n", 1, 1]]),
    lambda: compare.values_equal(("text", "yes"), ("text", "yes"), limits.current_deadline()),
], ids=["boxes", "braces", "parse", "canonical_form", "compare"])
def test_every_pure_python_step_checks_the_deadline(step):
    # no sympy involved: the deadline is not only the worker's
    with limits.armed(0.0):
        with pytest.raises(limits.Timeout):
            step()
    step()  # disarmed again after the call


# --- the CLI in a real process: any bytes in, valid UTF-8 out, exit status says bad input -----------
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli(stdin: bytes, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posttrain.cli", "verify", "--kind", "math"], input=stdin,
                          capture_output=True, timeout=120, cwd=ROOT, env=dict(os.environ, HF_HUB_OFFLINE="1", **env))


def _records(stdout: bytes) -> list[dict]:
    return [json.loads(x) for x in stdout.decode("utf-8").splitlines()]  # strict: must be valid UTF-8


def test_cli_survives_any_bytes_and_exits_non_zero_on_bad_input():
    lines = [
        b'{"response": "\\\\boxed{5}", "answer": "5"}',
        b'{"response": "\\\\boxed{\\ud800}", "answer": "1"}',  # a JSON-escaped lone surrogate
        b'{"response": "\xff\xfe\\\\boxed{5}", "answer": "5"}',  # not UTF-8
        b"\x00\x01\x02 binary \x80",
        b'{"response": "\xe7\xad\x94\xe6\xa1\x88\\\\boxed{85}", "answer": "85"}',  # UTF-8 Chinese
        b"[" * 100_000,  # nesting deep enough to overflow a recursive JSON parser
        b'{"response": "\\\\boxed{4}", "answer": "5"}',
    ]
    # strict ASCII stdio, as under LC_ALL=C: the output must still be UTF-8 and nothing may crash
    r = _cli(b"\n".join(lines) + b"\n", PYTHONIOENCODING="ascii:strict", LC_ALL="C", PYTHONUTF8="0")
    recs = _records(r.stdout)
    assert [x["reason"] for x in recs] == ["match", "unparsable_response", "bad_input", "bad_input", "match",
                                           "bad_input", "mismatch"], r.stderr
    assert recs[1]["answer"] == "\ufffd"  # the lone surrogate, replaced so the output is valid UTF-8
    assert recs[2]["error"].startswith("line 3: invalid UTF-8")
    assert r.returncode == 1
    assert "3 of 7 lines were bad input (line 3, 4, 6)" in r.stderr.decode()


def test_cli_exit_zero_when_every_line_is_good():
    r = _cli(b'{"response": "\\\\boxed{5}", "answer": "5"}\n\n{"response": "no box", "answer": "5"}\n')
    assert r.returncode == 0 and r.stderr == b""
    assert [x["reason"] for x in _records(r.stdout)] == ["match", "no_box"]


def test_stream_counts_and_bounds_long_lines(monkeypatch):
    monkeypatch.setattr(verify, "_MAX_LINE_BYTES", 64)
    src = io.BytesIO(b'{"response": "\\\\boxed{5}", "answer": "5"}\n' + b"x" * 500 + b"\n"
                     + b'{"response": "\\\\boxed{6}", "answer": "6"}\n')
    out = io.BytesIO()
    counts = verify_stream(src, out)
    recs = _records(out.getvalue())
    assert [x["reason"] for x in recs] == ["match", "bad_input", "match"]
    assert "longer than 64 bytes" in recs[1]["error"]
    assert counts == {"lines": 3, "bad_input": 1, "bad_lines": [2]}
