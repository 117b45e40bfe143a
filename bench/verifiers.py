"""Verifier benchmark: throughput (cases/s) and worst-case latency over a generated mix of cases.

Math part: a seeded mix of everyday RL cases (integers, fractions, decimals, symbolic, radicals,
sets/intervals, units/percent/degrees, Chinese, ~20k-char responses), failure modes (rounded
decimals, hedged, think-only, truncated boxes, bad gold), answers written to be paid without the
answer (an expression for a plain-number gold, words or marks around the value) and adversarial
CAS inputs (power towers, huge factorials, deep nesting, very long strings).  Every case is timed individually in one fresh
process (so the sympy worker's cold start is included), then the whole mix is streamed through
`verify_stream` in a fresh interpreter to measure the CLI path end to end (startup included).
Accuracy: the share of the mix scored as each case deserves (worker warm), and of the golden table
of tests/test_math_verifier.py.

Math adversarial part (math_adversarial): the false positives of issue 14 in each wrapping the unit
tests use and the attack table of tests/test_math_attacks.py (none may pay 1), and the speed targets the unit tests do not assert: each golden and
adversarial call, long responses, 48 boxes of long polynomials, 2,000 boxes, a 1 MB response, a
sympy overrun, the integer fast path, a 300-line stream.  No call may take 1 s or more.  A case
that runs past 60 s here (an older verifier without a whole-call deadline) is cut off, "capped".

Head to head (math_vs_math_verify, not run by default): this verifier against Hugging Face's
math-verify, run as open-r1's accuracy_reward runs it (and once more with the bare gold wrapped in
\boxed{}), on the same inputs: the golden table, the false-positive probes, the adversarial CAS
inputs, the long inputs and the mix.  All arms in one process, case by case (every arm scores a case
before the next; which goes first rotates), each call timed alone: accuracy, rewards of 1 where 0 is
deserved, calls at or over 1 s, exceptions, mean / median latency.  It needs the `bench` extra:
``.venv/bin/pip install -e '.[bench]'``.

Code sandbox part: runs/s for a trivial passing program (one child per run), and the latency of
each adversarial case (infinite loop, sleep, fork bomb, memory bomb, output flood, big file,
forbidden reads, socket) under the default limits; the worst one bounds a reward call.

Reward share: the wall time the reasoning-RL reward functions (correctness, format, language
consistency, Kimi length) take on one batch of 64 completions (8 prompts x 8 generations) built
from the world's math tasks, to set against the RL step time.

    .venv/bin/python bench/verifiers.py [--n 600] [--seed 0] [--only math,math_adversarial,...]
        [--results PATH] [--suffix _before]
    .venv/bin/python bench/verifiers.py --only math_vs_math_verify   # needs math-verify (see above)

Prints a table and writes bench/results/verifiers.json (the keys it measured; other keys are kept).
A before/after comparison runs this script from a checkout of the older code with
``--suffix _before --results <this file>``: its numbers land next to the current ones.
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posttrain.rewards.math import MATH_VERIFIER_VERSION, verify_math, verify_stream  # noqa: E402
from posttrain.rewards.code_judge import run_tests  # noqa: E402
from posttrain.rewards.code_sandbox import SANDBOX_VERSION, SandboxLimits, sandbox_isolation  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "verifiers.json"
SECTIONS = ("math", "math_adversarial", "code_sandbox", "reward_share", "math_vs_math_verify")
DEFAULT_SECTIONS = ("math", "math_adversarial", "code_sandbox", "reward_share")  # the last needs math-verify


def _think(rng: random.Random, chars: int) -> str:
    steps = ["Let me compute step by step.", "7+8=15, carry the 1.", "So x^2 = 4 and x = \\pm 2.",
             "Check: \\frac{1}{2} + \\frac{1}{3} = \\frac{5}{6}.", "个位7+8=15……", "Maybe \\boxed{3}? No."]
    out = []
    n = 0
    while n < chars:
        s = rng.choice(steps)
        out.append(s)
        n += len(s) + 1
    return "<think>" + " ".join(out) + "</think>"


# the reward each category of the mix deserves (i: the case's index within its category)
_WRONG_BY_DESIGN = {"int_wrong", "rounded", "hedged", "think_only", "truncated", "bad_gold", "adversarial",
                    "restated", "marked"}


def _expected_reward(cat: str, i: int) -> float:
    if cat in _WRONG_BY_DESIGN or (cat == "interval" and i % 2) or (cat == "tuple" and i % 3 == 0):
        return 0.0
    return 1.0


def math_cases(n: int, seed: int) -> list[tuple[str, str, str, float]]:
    """(category, response, gold, expected reward)."""
    rng = random.Random(seed)

    def box(x: str, think: int = 200) -> str:
        return _think(rng, think) + f"The answer is $\\boxed{{{x}}}$."

    gens = {
        "int": lambda i: (box(str(i)), str(i)),
        "int_wrong": lambda i: (box(str(i + 1)), str(i)),
        "fraction": lambda i: (box(f"\\frac{{{i}}}{{{i + 2}}}"), f"{i}/{i + 2}"),
        "decimal": lambda i: (box(str((i % 97) / 8)), f"\\dfrac{{{i % 97}}}{{8}}"),
        "rounded": lambda i: (box(f"{i}.333"), f"\\frac{{{3 * i + 1}}}{{3}}"),
        "thousands": lambda i: (box(f"{1 + i % 9},{i % 1000:03d}"), str((1 + i % 9) * 1000 + i % 1000)),
        "poly": lambda i: (box(f"x^2+{2 * i}x+{i * i}"), f"(x+{i})^2"),
        "radical": lambda i: (box(f"{1 + i % 5}\\sqrt{{2}}"), f"\\sqrt{{{2 * (1 + i % 5) ** 2}}}"),
        "pi": lambda i: (box(f"\\frac{{{i}\\pi}}{{2}}"), f"{i}\\pi/2"),
        "interval": lambda i: (box(f"[{i}, {i + 3})"), f"[{i},{i + 3}]" if i % 2 else f"[{i},{i + 3})"),
        "set": lambda i: (box(f"\\{{{i + 1}, {i}\\}}"), f"\\{{{i},{i + 1}\\}}"),
        "tuple": lambda i: (box(f"({i}, {i + 1})"), f"({i + 1},{i})" if i % 3 == 0 else f"({i},{i + 1})"),
        "units_pct_deg": lambda i: (box([f"{i} \\text{{ cm}}", f"{i}\\%", f"{i}^\\circ", f"x = {i}"][i % 4]),
                                    [str(i), f"{i}%", f"{i}", str(i)][i % 4]),
        "chinese_long": lambda i: (_think(rng, 20_000) + f"答案是\\boxed{{{i}}}。", str(i)),
        # golds that are not plain numbers: an expression is compared by value (sympy decides)
        "sympy": lambda i: (box(["\\sin(\\pi/6)", "\\frac{x^2-1}{x-1}", "\\log_2 8", "\\frac{1}{\\sqrt2-1}"][i % 4]),
                            ["\\cos(\\pi/3)", "x+1", "\\ln(e^3)", "1+\\sqrt2"][i % 4]),
        # the right value not written as a number, for a plain-number gold
        "restated": lambda i: (box([f"{i} + {i + 1} + 2 - 2", f"\\frac{{{2 * (2 * i + 1)}}}{{2}}", f"{2 * i + 1} \\cdot 1",
                                    f"\\sin^2 x + \\cos^2 x + {2 * i}"][i % 4]), str(2 * i + 1)),
        # the value with words or marks around it that change or hedge it
        "marked": lambda i: (box([f"{i} maybe", f"{i}左右", f"{i}\\%", f"\\not= {i}", f"\\bar{{{i}}}",
                                  f"{i}?"][i % 6]), str(i)),
        "hedged": lambda i: (f"\\boxed{{{i}}} or \\boxed{{{i + 1}}}", str(i)),
        "think_only": lambda i: (f"<think>\\boxed{{{i}}}</think>so it is {i}", str(i)),
        "truncated": lambda i: (f"so \\boxed{{\\frac{{{i}}}{{2}}", f"\\frac{{{i}}}{{2}}"),
        "bad_gold": lambda i: (box(str(i)), "\\frac{1}{"),
        "adversarial": lambda i: (box([
            "9^{9^{9^9}}", "100000!", "10^{10^{10}}", "(" * 500 + "1" + ")" * 500, "1" * 100_000,
            "2^2^2^2^2^2", "(x+y+z+w)^{40}", "\\exp(\\exp(\\exp(\\exp(100))))", "x^{x^{x^{x}}}",
            "\\sin(10^{10^{10}})", "\\frac{" * 200 + "1}{2}" * 200, "1000!!!",
        ][i % 12]), ["1", "x+1", "\\sin(x)"][i % 3]),
    }
    names = list(gens)
    cases = []
    for k in range(n):
        cat = names[k % len(names)]
        i = k // len(names) + 1
        cases.append((cat, *gens[cat](i), _expected_reward(cat, i)))
    rng.shuffle(cases)
    return cases


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def bench_math(n: int = 600, seed: int = 0) -> dict:
    cases = math_cases(n, seed)
    lat: list[float] = []
    by_cat: dict[str, list[float]] = defaultdict(list)
    reasons: dict[str, int] = defaultdict(int)
    worst = (0.0, "", "")
    right_cold = 0
    t_all = time.perf_counter()
    for cat, resp, gold, expected in cases:
        t0 = time.perf_counter()
        v = verify_math(resp, gold)
        dt = time.perf_counter() - t0
        lat.append(dt)
        by_cat[cat].append(dt)
        reasons[v.reason] += 1
        right_cold += v.reward == expected
        if dt > worst[0]:
            worst = (dt, cat, v.reason)
    total = time.perf_counter() - t_all
    # accuracy with the sympy worker warm (the cold pass above can time out while it starts)
    _wait_worker_ready()
    wrong = defaultdict(int)
    for cat, resp, gold, expected in cases:
        if verify_math(resp, gold).reward != expected:
            wrong[cat] += 1
    golden = golden_accuracy()

    # fast path: boxed integer vs integer gold
    fast_resp = "<think>7+8=15</think>The answer is \\boxed{85}."
    reps = 20_000
    t0 = time.perf_counter()
    for _ in range(reps):
        verify_math(fast_resp, "85")
    fast_us = (time.perf_counter() - t0) / reps * 1e6

    # CLI path end to end in a fresh interpreter (startup + lazy worker included)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for _, resp, gold, _ in cases:
            f.write(json.dumps({"response": resp, "answer": gold}, ensure_ascii=False) + "\n")
        path = f.name
    code = (
        "import sys; from posttrain.rewards.math import verify_stream; "
        f"verify_stream(open({path!r}, encoding='utf-8'), sys.stdout)"
    )
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, HF_HUB_OFFLINE="1"))
    stream_s = time.perf_counter() - t0
    os.unlink(path)
    stream_lines = len(r.stdout.splitlines()) if r.returncode == 0 else -1

    return {
        "version": MATH_VERIFIER_VERSION,
        "cases": len(cases),
        "seed": seed,
        "throughput_cases_per_s": round(len(cases) / total, 1),
        "latency_ms": {
            "mean": round(statistics.mean(lat) * 1e3, 3),
            "p50": round(_pct(lat, 0.50) * 1e3, 3),
            "p99": round(_pct(lat, 0.99) * 1e3, 3),
            "max": round(max(lat) * 1e3, 3),
        },
        "worst_case": {"ms": round(worst[0] * 1e3, 3), "category": worst[1], "reason": worst[2]},
        "cases_over_1s": sum(x >= 1.0 for x in lat),
        "accuracy": round(1 - sum(wrong.values()) / len(cases), 4),
        "accuracy_cold_worker": round(right_cold / len(cases), 4),
        "wrong_by_category": dict(sorted(wrong.items())),
        "golden_table": golden,
        "fast_path_int_us_per_call": round(fast_us, 2),
        "stream_cli_wall_s": round(stream_s, 3),
        "stream_cli_lines": stream_lines,
        "reasons": dict(sorted(reasons.items())),
        "by_category_ms": {
            c: {"n": len(xs), "mean": round(statistics.mean(xs) * 1e3, 3), "max": round(max(xs) * 1e3, 3)}
            for c, xs in sorted(by_cat.items())
        },
    }


def _wait_worker_ready(timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and verify_math("\\boxed{\\cos(0)}", "1").reason != "match":
        time.sleep(0.05)


def _test_module():
    """The math verifier's test tables are the benchmark's too: the golden table
    (tests/test_math_verifier.py), the adversarial inputs, false-positive probes and their wrappings
    (tests/test_math_verifier_robustness.py) and the attack table (tests/test_math_attacks.py), in one
    namespace."""
    tests = ROOT / "tests"
    if str(tests) not in sys.path:
        sys.path.insert(0, str(tests))  # the test files import their helper (sympy_worker) as pytest would
    found: dict = {}
    for name in ("test_math_attacks", "test_math_verifier_robustness", "test_math_verifier"):  # golden wins a clash (B)
        spec = importlib.util.spec_from_file_location(name, tests / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        found.update(vars(mod))
        if name == "test_math_attacks":
            found["attack_B"] = mod.B  # its own wrapping (a think block), not the golden file's
    return SimpleNamespace(**found)


def golden_accuracy() -> dict:
    """Share of the golden regression table (tests/test_math_verifier.py) scored as expected."""
    rows = _test_module().GOLDEN
    reward_wrong, reason_wrong = [], []
    for name, resp, gold, reward, reason in rows:
        v = verify_math(resp, gold)
        if v.reward != reward:
            reward_wrong.append(name)
        elif v.reason != reason:
            reason_wrong.append(name)
    return {"rows": len(rows), "reward_accuracy": round(1 - len(reward_wrong) / len(rows), 4),
            "reward_wrong": reward_wrong, "reason_wrong": reason_wrong}


class _BenchCap(BaseException):
    """Raised by the alarm; a BaseException so that the verifier's own `except Exception` lets it by."""


_CAP_S = 60.0  # how long one timing case may run here (an older verifier has no deadline of its own)


def _timed(fn) -> tuple[float, object]:
    """(seconds, result) of fn(); result None when it ran past _CAP_S and was interrupted."""
    def alarm(*_):
        raise _BenchCap()

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, _CAP_S)
    t0 = time.perf_counter()
    try:
        out = fn()
    except _BenchCap:
        out = None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return time.perf_counter() - t0, out


def bench_math_adversarial() -> dict:
    """The false positives of issue 14 (each wrapping the tests use) and the speed targets the unit
    tests no longer assert: every call under 1 s, inputs built to outrun the deadline included."""
    from posttrain.rewards.math import worker

    tm = _test_module()
    _wait_worker_ready()
    fp_cases = {}
    for name, answer, gold, _ in tm.FALSE_POSITIVES:
        for wrap, fn in tm.WRAPS.items():
            dt, v = _timed(lambda: verify_math(fn(answer), gold))
            fp_cases[f"{name}/{wrap}"] = {"ms": round(dt * 1e3, 3), "reward": v.reward, "reason": v.reason}
    for name, answer, gold, _ in tm.HOLES:
        dt, v = _timed(lambda: verify_math(tm.attack_B(answer), gold))
        fp_cases[f"attack/{name}"] = {"ms": round(dt * 1e3, 3), "reward": v.reward, "reason": v.reason}

    timing: dict[str, dict] = {}

    def target(name: str, seconds: float, fn, calls: int = 1) -> None:
        dt, v = _timed(fn)
        timing[name] = {"ms": round(dt * 1e3, 3), "target_ms": seconds * 1e3, "ok": dt < seconds,
                        "calls": calls, "reason": getattr(v, "reason", None) if v is not None else "capped"}

    for name, resp, gold, _, _ in tm.GOLDEN:
        target(f"golden/{name}", 1.0, lambda: verify_math(resp, gold))
    for k, answer in enumerate(tm.ADVERSARIAL):
        for gold in ("1", "x+1", "\\sin(x)"):
            target(f"adversarial/{k}/{gold}", 1.0, lambda: verify_math(tm.B(answer), gold))
    think = "<think>" + ("Let me compute step by step. 7+8=15, carry the 1. " * 400) + "</think>"
    target("response_20k_chars_x3", 0.5, lambda: [verify_math(think + "So \\boxed{85}.", "85"),
                                                   verify_math(think + "So \\boxed{84}.", "85"),
                                                   verify_math(think[:-len("</think>")], "85")][-1], calls=3)
    huge = "x" * 2_000_000 + "\\boxed{3}"
    target("response_2MB_one_box", 1.0, lambda: verify_math(huge, "3"))
    poly = "+".join(f"{k + 1}a^{{{k}}}b" for k in range(40))
    boxes_48 = " ".join(f"\\boxed{{{poly}+(a+b+c+d+e+f)^6+{i}-{i}}}" for i in range(48))
    target("48_boxes_long_polynomials", 1.0, lambda: verify_math(boxes_48, poly))
    boxes_2000, boxes_1mb = tm._equal_polynomial_boxes(2000), tm._equal_polynomial_boxes(30_000)
    target("2000_boxes", 1.0, lambda: verify_math(boxes_2000, "(a+b+c+d+e+f)^6"))
    target("1MB_response_30000_boxes", 1.0, lambda: verify_math(boxes_1mb, "(a+b+c+d+e+f)^6"))
    saved = worker.WORKER_CALL_S
    worker.WORKER_CALL_S = 0.001  # sympy overruns its budget: killed and respawned within the call
    try:
        target("worker_timeout_kill_respawn", 1.0, lambda: verify_math(tm.B("\\sin^2 x + \\cos^2 x"), "1"))
    finally:
        worker.WORKER_CALL_S = saved
    _wait_worker_ready()
    fast = "<think>7+8=15</think>The answer is \\boxed{85}."
    dt, _ = _timed(lambda: [verify_math(fast, "85") for _ in range(3000)])
    timing["fast_path_int_per_call"] = {"ms": round(dt / 3000 * 1e3, 5), "target_ms": 0.2, "ok": dt / 3000 < 200e-6,
                                        "calls": 3000, "reason": "match"}
    lines = [json.dumps(c) for c in tm.stream_cases(300)]
    target("stream_300_cases", 10.0, lambda: verify_stream(lines, io.StringIO()), calls=300)

    per_call = {k: t["ms"] / t["calls"] for k, t in timing.items()}
    return {
        "version": MATH_VERIFIER_VERSION,
        "false_positive_cases": fp_cases,
        "false_positives": sorted(k for k, c in fp_cases.items() if c["reward"] != 0.0),
        "timing_cases": timing,
        "targets_missed": sorted(k for k, t in timing.items() if not t["ok"]),
        "calls_over_1s": sorted(k for k, ms in per_call.items() if ms >= 1000.0)
        + sorted(k for k, c in fp_cases.items() if c["ms"] >= 1000.0),
        "worst_call": max(per_call.items(), key=lambda kv: kv[1]),
    }


def _count_by_category(names: list[str]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for name in names:
        counts[name.split("/")[0]] += 1
    return dict(sorted(counts.items()))


SANDBOX_ADVERSARIAL = {
    "infinite_loop": "while True:\n    pass\n",
    "sleep": "import time\ntime.sleep(60)\n",
    "fork_bomb": "import os\nwhile True:\n    os.fork()\n",
    "memory_bomb": "xs = []\nwhile True:\n    xs.append(bytearray(2**20))\n",
    "huge_alloc": "x = bytearray(10**10)\n",
    "output_flood": "while True:\n    print('x' * 10000)\n",
    "big_file": "with open('big', 'wb') as f:\n    while True:\n        f.write(b'z' * 2**16)\n",
    "read_passwd": "print(open('/etc/passwd').read())\n",
    "read_dotdot": "print(open('../../../etc/passwd').read())\n",
    "socket": "import socket\nsocket.create_connection(('127.0.0.1', 22))\n",
}


def bench_code_sandbox(runs: int = 100) -> dict:
    limits = SandboxLimits()
    isolation = sandbox_isolation()  # probed once, outside the timings
    trivial = "a, b = map(int, input().split())\nprint(a + b)\n"
    test = [{"input": "2 3\n", "output": "5"}]
    lat = []
    t_all = time.perf_counter()
    for _ in range(runs):
        t0 = time.perf_counter()
        v = run_tests(trivial, test, limits=limits)
        lat.append(time.perf_counter() - t0)
        assert v.reward == 1.0, v
    total = time.perf_counter() - t_all
    adversarial = {}
    for name, code in SANDBOX_ADVERSARIAL.items():
        t0 = time.perf_counter()
        v = run_tests(code, [{"input": "", "output": "ok"}], limits=limits)
        adversarial[name] = {"ms": round((time.perf_counter() - t0) * 1e3, 1), "reward": v.reward,
                             "reason": v.reason}
    worst = max(adversarial.items(), key=lambda kv: kv[1]["ms"])
    return {
        "version": SANDBOX_VERSION,
        "isolation": isolation,
        "limits": {"cpu_s": limits.cpu_s, "wall_s": limits.wall_s, "memory_mib": limits.memory_bytes // 2**20,
                   "output_bytes": limits.output_bytes, "file_bytes": limits.file_bytes,
                   "max_processes": limits.max_processes},
        "trivial_runs": runs,
        "trivial_runs_per_s": round(runs / total, 1),
        "trivial_latency_ms": {"p50": round(_pct(lat, 0.5) * 1e3, 2), "max": round(max(lat) * 1e3, 2)},
        "adversarial": adversarial,
        "adversarial_worst": {"case": worst[0], **worst[1]},
        "adversarial_all_zero": all(a["reward"] == 0.0 for a in adversarial.values()),
    }


def reasoning_rl_batch(seed: int, prompts: int = 8, generations: int = 8) -> dict:
    """A GRPO-shaped batch: `generations` consecutive completions per prompt, mixing right and wrong
    answers, drifting languages, long and short reasoning, missing boxes and unfinished thinking."""
    from posttrain.chat import assemble_response
    from posttrain.world import tasks

    rng = random.Random(seed)
    problems = tasks.math_problems(prompts, seed, "train", english_step_share=0.0)
    cols: dict[str, list] = {"completions": [], "answer": [], "kind": [], "language": [], "thinking": [],
                             "completion_ids": []}
    for p in problems:
        for _ in range(generations):
            mixed = tasks.render_reasoning(p.op, p.a, p.b, p.language, english_step_share=0.3, rng=rng)
            reasoning = rng.choice([p.reasoning, p.reasoning, mixed, (p.reasoning + " ") * rng.randint(2, 6)])
            roll = rng.random()
            if roll < 0.55:
                text = assemble_response(reasoning, tasks.default_math_answer(p.answer, p.language))
            elif roll < 0.85:
                wrong = str(int(p.answer) + rng.choice([-10, -1, 1, 10, 100]))
                text = assemble_response(reasoning, tasks.default_math_answer(wrong, p.language))
            elif roll < 0.93:
                text = assemble_response(reasoning, f"so it is {p.answer}")  # no box
            else:
                text = "<think>\n" + reasoning  # ran out of tokens while thinking
            cols["completions"].append(text)
            cols["answer"].append(p.answer)
            cols["kind"].append("math")
            cols["language"].append(p.language)
            cols["thinking"].append(True)
            cols["completion_ids"].append(list(range(len(text))))  # the world tokenizer is per character
    return cols


def bench_reward_share(seed: int = 0, repeats: int = 20) -> dict:
    from types import SimpleNamespace

    from posttrain.rewards import RewardSettings, build_rewards

    weights = {"correctness": 1.0, "format": 0.2, "language_consistency": 0.2, "length": 0.1}
    funcs, _ = build_rewards(weights, RewardSettings(num_generations=8))
    batch = reasoning_rl_batch(seed)
    completions = batch.pop("completions")
    kwargs = {**batch, "prompts": [""] * len(completions), "trainer_state": SimpleNamespace(global_step=10**6)}

    def one_pass() -> dict[str, float]:
        times = {}
        for fn in funcs:
            t0 = time.perf_counter()
            out = fn(completions, **kwargs)
            times[fn.__name__] = time.perf_counter() - t0
            assert len(out) == len(completions)
        return times

    cold = one_pass()  # first batch: lazy imports, the gold-answer cache is empty
    passes = [one_pass() for _ in range(repeats)]
    per_fn = {name: round(statistics.median(p[name] for p in passes) * 1e3, 3) for name in cold}
    totals = [sum(p.values()) for p in passes]
    correct = sum(r == 1.0 for r in funcs[0](completions, **kwargs))
    return {
        "weights": weights,
        "batch": len(completions),
        "groups": f"{len(completions) // 8} prompts x 8 generations",
        "correct_share": round(correct / len(completions), 3),
        "mean_completion_chars": round(statistics.mean(len(c) for c in completions), 1),
        "ms_per_batch": {"median": round(statistics.median(totals) * 1e3, 3), "max": round(max(totals) * 1e3, 3),
                         "cold_first_batch": round(sum(cold.values()) * 1e3, 3)},
        "ms_per_batch_by_function": per_fn,
        "repeats": repeats,
    }


def _print_math(res: dict) -> None:
    print(f"math verifier {res['version']}: {res['cases']} cases")
    print(f"{'category':16s} {'n':>4s} {'mean ms':>9s} {'max ms':>9s}")
    for c, s in res["by_category_ms"].items():
        print(f"{c:16s} {s['n']:4d} {s['mean']:9.3f} {s['max']:9.3f}")
    lm = res["latency_ms"]
    print(f"throughput       {res['throughput_cases_per_s']:.1f} cases/s")
    print(f"latency ms       mean {lm['mean']}  p50 {lm['p50']}  p99 {lm['p99']}  max {lm['max']}")
    print(f"worst case       {res['worst_case']}")
    print(f"cases over 1 s   {res['cases_over_1s']}")
    print(f"fast path        {res['fast_path_int_us_per_call']} us/call (boxed int vs int gold)")
    print(f"stream (CLI)     {res['stream_cli_wall_s']} s wall for {res['stream_cli_lines']} lines, fresh process")
    print(f"reasons          {res['reasons']}")
    print(f"accuracy         {res['accuracy']} (worker warm; {res['accuracy_cold_worker']} in the timed pass), "
          f"wrong {res['wrong_by_category']}")
    print(f"golden table     {res['golden_table']}")


def _print_math_adversarial(res: dict) -> None:
    fp = res["false_positive_cases"]
    print(f"math verifier {res['version']}: {len(fp)} false-positive probes, {len(res['false_positives'])} "
          f"paid 1 {res['false_positives']}")
    t = res["timing_cases"]
    for name in sorted(t, key=lambda k: -t[k]["ms"] / t[k]["calls"])[:12]:
        c = t[name]
        print(f"  {name:34s} {c['ms']:10.3f} ms  target {c['target_ms']:g} ms  {c['reason']}")
    print(f"targets missed   {res['targets_missed']}")
    print(f"calls over 1 s   {res['calls_over_1s']}  worst {res['worst_call']}")


def _print_sandbox(res: dict) -> None:
    print(f"code sandbox {res['version']} ({res['isolation']} isolation), limits {res['limits']}")
    print(f"trivial program  {res['trivial_runs_per_s']} runs/s  latency ms {res['trivial_latency_ms']}")
    for name, a in res["adversarial"].items():
        print(f"  {name:14s} {a['ms']:8.1f} ms  reward {a['reward']}  {a['reason']}")
    print(f"worst adversarial {res['adversarial_worst']}")


def _print_share(res: dict) -> None:
    print(f"reasoning-RL rewards {res['weights']} on {res['batch']} completions ({res['groups']}), "
          f"{res['correct_share']:.0%} correct")
    print(f"ms per batch     {res['ms_per_batch']}  by function {res['ms_per_batch_by_function']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=",".join(DEFAULT_SECTIONS),
                    help=f"comma-separated sections to measure (others keep their stored results); "
                         f"known: {', '.join(SECTIONS)}; default: {', '.join(DEFAULT_SECTIONS)}")
    ap.add_argument("--results", type=Path, default=RESULTS, help="JSON file the results are merged into")
    ap.add_argument("--suffix", default="",
                    help="record under '<section><suffix>' (e.g. _before: a run from an older checkout, "
                         "kept next to the current numbers)")
    args = ap.parse_args()
    sections = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = sections - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}")

    measured = {}
    if "math" in sections:
        measured["math"] = bench_math(args.n, args.seed)
        _print_math(measured["math"])
    if "math_adversarial" in sections:
        measured["math_adversarial"] = bench_math_adversarial()
        _print_math_adversarial(measured["math_adversarial"])
    if "math_vs_math_verify" in sections:
        from verifiers_vs_math_verify import bench_math_vs_math_verify, print_math_vs_math_verify

        measured["math_vs_math_verify"] = bench_math_vs_math_verify(args.n, args.seed)
        print_math_vs_math_verify(measured["math_vs_math_verify"])
    if "code_sandbox" in sections:
        measured["code_sandbox"] = bench_code_sandbox()
        _print_sandbox(measured["code_sandbox"])
    if "reward_share" in sections:
        measured["reward_share"] = bench_reward_share(args.seed)
        _print_share(measured["reward_share"])

    results = args.results.resolve()
    results.parent.mkdir(parents=True, exist_ok=True)
    data = {}
    if results.exists():
        try:
            data = json.loads(results.read_text())
        except ValueError:
            data = {}
    stamp = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
    }
    for key, res in measured.items():
        data[key + args.suffix] = {**res, **stamp}
    results.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {results}")


if __name__ == "__main__":
    main()
