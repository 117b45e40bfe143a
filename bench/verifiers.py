"""Verifier benchmark: throughput (cases/s) and worst-case latency over a generated mix of cases.

Math part: a seeded mix of everyday RL cases (integers, fractions, decimals, symbolic, radicals,
sets/intervals, units/percent/degrees, Chinese, ~20k-char responses), failure modes (rounded
decimals, hedged, think-only, truncated boxes, bad gold) and adversarial CAS inputs (power towers,
huge factorials, deep nesting, very long strings).  Every case is timed individually in one fresh
process (so the sympy worker's cold start is included), then the whole mix is streamed through
`verify_stream` in a fresh interpreter to measure the CLI path end to end (startup included).

Code sandbox part: runs/s for a trivial passing program (one child per run), and the latency of
each adversarial case (infinite loop, sleep, fork bomb, memory bomb, output flood, big file,
forbidden reads, socket) under the default limits; the worst one bounds a reward call.

Reward share: the wall time the reasoning-RL reward functions (correctness, format, language
consistency, Kimi length) take on one batch of 64 completions (8 prompts x 8 generations) built
from the world's math tasks, to set against the RL step time.

    .venv/bin/python bench/verifiers.py [--n 600] [--seed 0] [--only math,code_sandbox,reward_share]

Prints a table and writes bench/results/verifiers.json (the keys it measured; other keys are kept).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posttrain.rewards.math_verifier import MATH_VERIFIER_VERSION, verify_math  # noqa: E402
from posttrain.rewards.code_sandbox import (  # noqa: E402
    SANDBOX_VERSION, SandboxLimits, run_tests, sandbox_isolation,
)

RESULTS = ROOT / "bench" / "results" / "verifiers.json"


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


def math_cases(n: int, seed: int) -> list[tuple[str, str, str]]:
    """(category, response, gold)."""
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
                                    [str(i), f"{i / 100}", f"{i}", str(i)][i % 4]),
        "chinese_long": lambda i: (_think(rng, 20_000) + f"答案是\\boxed{{{i}}}。", str(i)),
        "sympy": lambda i: (box(["\\sin(\\pi/6)", "\\frac{x^2-1}{x-1}", "\\log_2 8", "\\frac{1}{\\sqrt2-1}"][i % 4]),
                            ["\\frac12", "x+1", "3", "1+\\sqrt2"][i % 4]),
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
        cases.append((cat, *gens[cat](k // len(names) + 1)))
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
    t_all = time.perf_counter()
    for cat, resp, gold in cases:
        t0 = time.perf_counter()
        v = verify_math(resp, gold)
        dt = time.perf_counter() - t0
        lat.append(dt)
        by_cat[cat].append(dt)
        reasons[v.reason] += 1
        if dt > worst[0]:
            worst = (dt, cat, v.reason)
    total = time.perf_counter() - t_all

    # fast path: boxed integer vs integer gold
    fast_resp = "<think>7+8=15</think>The answer is \\boxed{85}."
    reps = 20_000
    t0 = time.perf_counter()
    for _ in range(reps):
        verify_math(fast_resp, "85")
    fast_us = (time.perf_counter() - t0) / reps * 1e6

    # CLI path end to end in a fresh interpreter (startup + lazy worker included)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for _, resp, gold in cases:
            f.write(json.dumps({"response": resp, "answer": gold}, ensure_ascii=False) + "\n")
        path = f.name
    code = (
        "import sys; from posttrain.rewards.math_verifier import verify_stream; "
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
        "fast_path_int_us_per_call": round(fast_us, 2),
        "stream_cli_wall_s": round(stream_s, 3),
        "stream_cli_lines": stream_lines,
        "reasons": dict(sorted(reasons.items())),
        "by_category_ms": {
            c: {"n": len(xs), "mean": round(statistics.mean(xs) * 1e3, 3), "max": round(max(xs) * 1e3, 3)}
            for c, xs in sorted(by_cat.items())
        },
    }


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

    from posttrain.rewards import build_rewards

    weights = {"correctness": 1.0, "format": 0.2, "language_consistency": 0.2, "length": 0.1}
    funcs, _ = build_rewards(weights, num_generations=8)
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
    ap.add_argument("--only", default="math,code_sandbox,reward_share",
                    help="comma-separated sections to measure (others keep their stored results)")
    args = ap.parse_args()
    sections = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = sections - {"math", "code_sandbox", "reward_share"}
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; known: math, code_sandbox, reward_share")

    measured = {}
    if "math" in sections:
        measured["math"] = bench_math(args.n, args.seed)
        _print_math(measured["math"])
    if "code_sandbox" in sections:
        measured["code_sandbox"] = bench_code_sandbox()
        _print_sandbox(measured["code_sandbox"])
    if "reward_share" in sections:
        measured["reward_share"] = bench_reward_share(args.seed)
        _print_share(measured["reward_share"])

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    data = {}
    if RESULTS.exists():
        try:
            data = json.loads(RESULTS.read_text())
        except ValueError:
            data = {}
    stamp = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
    }
    for key, res in measured.items():
        data[key] = {**res, **stamp}
    RESULTS.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
