"""`posttrain verify --kind KIND` for every reward kind, run as a real subprocess: one verdict line
per input line whatever the bytes, valid UTF-8 JSON out under strict ASCII stdio, bad input naming
its field, exit status 1 with counts on stderr when any line was bad, and the code kind's refusal
to run programs without OS isolation."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys

import pytest

from posttrain.rewards.verify_cli import CHECKS, KINDS, verify_lines

from conftest import ROOT

# Lines every kind must survive: bytes that are not UTF-8, binary junk, JSON nested past any
# recursive parser, JSON that is not an object. Each gets a bad_input verdict, none a crash.
GARBAGE = [b"\xff\xfe\x00 garbage \x80\xc3", b"\x00\x01\x02 binary \x80", b"[" * 100_000, b'["a", "list"]']

CODE_OK = "```python\nprint(int(input()) * 2)\n```"
DOUBLES = [{"input": "3", "output": "6"}]
# A tool-use episode in its canonical text (posttrain.agents.episodes): one call, its result, the reply.
TRANSCRIPT = ('<tool_call>\n{"name": "get", "arguments": {"key": "a"}}\n</tool_call><|im_end|>\n<|im_start|>user\n'
              '<tool_response>\n17\n</tool_response><|im_end|>\n<|im_start|>assistant\n17<|im_end|>')

# Per kind: (a good line, its expected reason), a line whose response holds a JSON-escaped lone
# surrogate (judged, not a crash), the line without the field the kind needs (the field's name),
# and a line where that field has the wrong type.
CASES = {
    "math": ({"response": "\\boxed{5}", "answer": "5"}, "match",
             b'{"response": "\\\\boxed{\\ud800}", "answer": "1"}',
             {"response": "\\boxed{5}"}, "answer", {"response": "\\boxed{5}", "answer": [5]}),
    "instruction": ({"response": "The results are in, all done", "constraints": [{"type": "ends_with", "value": "done"}]},
                    "constraints_met",
                    b'{"response": "\\ud800 Hello there, the answer is done", '
                    b'"constraints": [{"type": "forbidden_words", "words": ["cat"]}]}',
                    {"response": "Hello there"}, "constraints",
                    {"response": "Hello there", "constraints": "[{not json"}),
    "code": ({"response": CODE_OK, "tests": DOUBLES}, "pass",
             b'{"response": "```python\\nprint(\\"\\ud800\\")\\n```", "tests": [{"input": "", "output": "x"}]}',
             {"response": CODE_OK}, "tests", {"response": CODE_OK, "tests": [{"neither": "input nor call"}]}),
    "format": ({"response": "<think>two plus three</think>\\boxed{5}", "thinking": True}, "ok",
               b'{"response": "<think>\\udfff</think>\\\\boxed{5}", "thinking": true}',
               {"response": "<think>r</think>\\boxed{5}"}, "thinking",
               {"response": "<think>r</think>\\boxed{5}", "thinking": "yes"}),
    "language": ({"response": "<think>add the two numbers</think>5", "language": "en"}, "measured",
                 b'{"response": "<think>\\ud83d add numbers</think>5", "language": "en"}',
                 {"response": "<think>add the two numbers</think>5"}, "language",
                 {"response": "<think>add</think>5", "language": "fr"}),
    "tool": ({"response": TRANSCRIPT, "environment": "kv_store", "setup": {"items": {"a": "17"}}, "answer": "17"}, "solved",
             b'{"response": "\\ud800 17<|im_end|>", "environment": "kv_store", "answer": "17"}',
             {"response": TRANSCRIPT, "answer": "17"}, "environment", {"response": TRANSCRIPT, "environment": 5}),
}


def _code_args() -> list[str]:
    from posttrain.rewards.code_sandbox import sandbox_mode

    return [] if sandbox_mode() != "none" else ["--unsafe-allow-unisolated"]


def _verify(kind: str, stdin: bytes, *args: str, prefix: tuple[str, ...] = (), **env) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "posttrain.cli", "verify", "--kind", kind, *args],
                          input=stdin, capture_output=True, timeout=300, cwd=ROOT,
                          env=dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT), **env))


def _records(stdout: bytes) -> list[dict]:
    return [json.loads(x) for x in stdout.decode("utf-8").splitlines()]  # strict: must be valid UTF-8


def _line(obj: dict) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def test_every_reward_kind_has_a_case():
    assert set(CASES) == set(KINDS) == {"math", "instruction", "code", "format", "language", "tool"}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_kind_survives_any_bytes_and_names_the_missing_field(kind):
    good, good_reason, surrogate, missing, missing_field, wrong_type = CASES[kind]
    lines = [_line(good), *GARBAGE, surrogate, _line(missing), _line(wrong_type), b"", _line(good)]
    args = _code_args() if kind in ("code", "tool") else []
    # strict ASCII stdio, as under LC_ALL=C: the output must still be UTF-8 and nothing may crash
    r = _verify(kind, b"\n".join(lines) + b"\n", *args, PYTHONIOENCODING="ascii:strict", LC_ALL="C", PYTHONUTF8="0")
    recs = _records(r.stdout)
    assert len(recs) == len(lines) - 1, r.stderr.decode(errors="replace")  # the blank line has no verdict
    assert recs[0]["reason"] == good_reason and recs[0]["reward"] not in (0.0, None), recs[0]
    assert recs[-1] == recs[0]  # the stream goes on after every kind of bad line
    for rec in recs[1:5]:
        assert rec["reason"] == "bad_input" and rec["reward"] == 0.0 and "field" not in rec, rec
    assert recs[1]["error"].startswith("line 2: invalid UTF-8")
    assert recs[3]["error"].startswith("line 4: invalid JSON")
    assert recs[4]["error"] == "line 5: expected a JSON object"
    # the lone surrogate is judged like any reply (as U+FFFD), never a bad line or a verifier error
    assert recs[5]["reason"] not in ("bad_input", "verifier_error"), recs[5]
    assert recs[6]["reason"] == "bad_input" and recs[6]["field"] == missing_field
    assert f"missing key '{missing_field}'" in recs[6]["error"] and recs[6]["error"].startswith("line 7:")
    assert recs[7]["reason"] == "bad_input" and recs[7]["field"] == missing_field, recs[7]
    assert r.returncode == 1
    assert "6 of 9 lines were bad input (line 2, 3, 4, 5, 7, 8)" in r.stderr.decode()


@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_kind_exits_zero_when_every_line_is_judged(kind):
    good = CASES[kind][0]
    r = _verify(kind, _line(good) + b"\n\n" + _line(good) + b"\n", *(_code_args() if kind in ("code", "tool") else []))
    recs = _records(r.stdout)
    assert r.returncode == 0, r.stderr
    assert [x["reason"] for x in recs] == [CASES[kind][1]] * 2
    stderr = r.stderr.decode()
    assert stderr == "" if kind not in ("code", "tool") else stderr.count("sandbox mode: ") == 1  # once, not per line


def test_instruction_verdicts_explain_the_score():
    constraints = [{"type": "no_comma"}, {"type": "max_words", "value": 8}]
    lines = [
        {"response": "Paris is the capital of France", "constraints": constraints},
        {"response": "Paris, the capital, is in France", "constraints": json.dumps(constraints)},
        {"response": "yes yes yes yes", "constraints": constraints},  # holds both, and earns nothing
        {"response": "<think>still going", "constraints": constraints},
        {"response": "42", "constraints": constraints, "answer": "42"},  # a number is content for a numeric task
        {"response": "Paris is the capital", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]},
        {"response": "Paris", "instruction_id_list": ["no:such_id"], "kwargs": [{}]},
        {"response": "Paris", "constraints": [{"type": "min_words", "value": 0}]},  # vacuous: refused
    ]
    r = _verify("instruction", b"\n".join(_line(x) for x in lines) + b"\n")
    recs = _records(r.stdout)
    assert [(x["reason"], x["reward"]) for x in recs[:6]] == [
        ("constraints_met", 1.0), ("constraints_failed", 0.0), ("guard:degenerate", 0.0),
        ("unfinished_thinking", 0.0), ("constraints_met", 1.0), ("constraints_met", 1.0)]
    assert recs[1]["constraints"] == [{"type": "no_comma", "held": False}, {"type": "max_words", "held": True}]
    assert all(c["held"] for c in recs[2]["constraints"])   # the checkers held; the guard refused (as training does)
    assert recs[5]["constraints"] == [{"type": "no_comma", "held": True}]
    assert recs[6]["field"] == "instruction_id_list" and "no verifier here" in recs[6]["error"]
    assert recs[7]["field"] == "constraints" and "min_words" in recs[7]["error"]
    assert r.returncode == 1


def test_format_and_language_verdicts_follow_the_rewards():
    fmt = [
        {"response": "<think></think>\\boxed{5}", "thinking": False},
        {"response": "<think>reasoning</think>\\boxed{5}", "thinking": False},
        {"response": "<think>add two and three</think>\\boxed{5} or \\boxed{6}", "thinking": True},
        {"response": "\\boxed{5}", "thinking": True},
    ]
    recs = _records(_verify("format", b"\n".join(_line(x) for x in fmt)).stdout)
    assert [(x["reward"], x["reason"], x["mode_ok"]) for x in recs] == [
        (1.0, "ok", True), (0.0, "mode_mismatch", False), (0.0, "format_mismatch", True), (0.0, "mode_mismatch", False)]
    assert recs[2]["problem"].startswith("2 boxed answers") and recs[3]["problem"] == "no closed think block"
    lang = [
        {"response": "<think>先算 then add</think>5", "language": "zh"},
        {"response": "<think>12 + 3</think>15", "language": "en"},
        {"response": "no think block", "language": "en"},
    ]
    r = _verify("language", b"\n".join(_line(x) for x in lang))
    assert [(x["reward"], x["reason"]) for x in _records(r.stdout)] == [
        (2 / 4, "measured"), (None, "no_words"), (None, "no_reasoning")]
    assert r.returncode == 0


def test_code_verdicts_come_from_the_sandbox():
    lines = [
        {"response": "```python\ndef f(a):\n    return a + 1\n```", "tests": json.dumps([{"call": "f(1)", "expected": "3"}])},
        {"response": "no fenced code here", "tests": DOUBLES},
        {"response": "```python\nwhile True:\n    pass\n```", "tests": DOUBLES},
        {"response": CODE_OK, "tests": []},
    ]
    r = _verify("code", b"\n".join(_line(x) for x in lines), *_code_args())
    recs = _records(r.stdout)
    assert [x["reason"] for x in recs] == ["wrong_answer", "no_code", "cpu_limit", "bad_input"], recs
    assert recs[0]["details"] == ["test 0: wrong_answer: f(1) -> '2', expected '3'"]
    assert recs[3]["field"] == "tests"
    assert r.returncode == 1


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv: a process with every capability dropped cannot isolate")
def test_code_kind_refuses_without_isolation_until_opted_in():
    """A real process that cannot isolate: root with every capability dropped (bwrap and the
    namespaces mode both need CAP_SYS_ADMIN as root)."""
    nocaps = (shutil.which("setpriv"), "--inh-caps=-all", "--bounding-set=-all", "--")
    stdin = _line({"response": CODE_OK, "tests": DOUBLES}) + b"\n"
    refused = _verify("code", stdin, prefix=nocaps)
    assert refused.returncode == 2 and refused.stdout == b""
    message = refused.stderr.decode().strip()
    assert len(message.splitlines()) == 1, message
    assert "apt-get install bubblewrap" in message and "--unsafe-allow-unisolated" in message
    allowed = _verify("code", stdin, "--unsafe-allow-unisolated", prefix=nocaps)
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stderr.decode().startswith("sandbox mode: none, UNISOLATED")
    assert [x["reason"] for x in _records(allowed.stdout)] == ["pass"]


def test_a_verifier_that_raises_costs_its_line_only():
    def check(obj: dict) -> dict:
        if obj.get("boom"):
            raise RuntimeError("verifier bug")
        return {"reward": 1.0, "reason": "ok"}

    out = io.BytesIO()
    counts = verify_lines(io.BytesIO(b'{"a": 1}\n{"boom": true}\n\xff\n{"a": 2}\n'), out, check)
    recs = _records(out.getvalue())
    assert [x["reason"] for x in recs] == ["ok", "verifier_error", "bad_input", "ok"]
    assert recs[1]["error"] == "line 2: RuntimeError: verifier bug"
    assert counts == {"lines": 4, "bad_input": 1, "bad_lines": [3], "errors": 1, "error_lines": [2]}


def test_help_names_every_kind_and_its_fields():
    from posttrain.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["verify"]
    text = sub.format_help()
    for word in (*KINDS, '"answer"', '"constraints"', '"instruction_id_list"', '"tests"', '"thinking"',
                 '"language"', "--unsafe-allow-unisolated", "bad_input"):
        assert word in text, word


def test_math_verdicts_are_the_ones_training_pays_prompt_included():
    """`posttrain verify --kind math` judges through `verify_row` with the line's prompt: an answer
    that restates the question is unevaluated there as in training and evaluation."""
    from posttrain.rewards import verify_row

    lines = [{"response": "\\boxed{71 + 37}", "answer": "108", "prompt": "Compute 71 + 37."},
             {"response": "\\boxed{108}", "answer": "108", "prompt": [{"role": "user", "content": "Compute 71 + 37."}]},
             {"response": "\\boxed{108}", "answer": "108"}]
    out = io.StringIO()
    verify_lines(io.BytesIO("\n".join(json.dumps(x) for x in lines).encode()), out, CHECKS["math"])
    verdicts = [json.loads(line) for line in out.getvalue().splitlines()]
    expected = [verify_row(x["response"], {"kind": "math", "answer": x["answer"], "prompt": x.get("prompt")})
                for x in lines]
    assert [(v["reward"], v["reason"]) for v in verdicts] == [tuple(e) for e in expected]
    assert verdicts[0]["reward"] == 0.0 and verdicts[1]["reward"] == verdicts[2]["reward"] == 1.0
    assert verdicts[1]["answer"] == "108"
