"""Verifier benchmark: throughput (cases/s) and worst-case latency over a generated mix of cases.

Math part: a seeded mix of everyday RL cases (integers, fractions, decimals, symbolic, radicals,
sets/intervals, units/percent/degrees, Chinese, ~20k-char responses), failure modes (rounded
decimals, hedged, think-only, truncated boxes, bad gold) and adversarial CAS inputs (power towers,
huge factorials, deep nesting, very long strings).  Every case is timed individually in one fresh
process (so the sympy worker's cold start is included), then the whole mix is streamed through
`verify_stream` in a fresh interpreter to measure the CLI path end to end (startup included).

    .venv/bin/python bench/verifiers.py [--n 600] [--seed 0]

Prints a table and writes bench/results/verifiers.json (the "math" key; other keys are kept).
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    res = bench_math(args.n, args.seed)

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

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    data = {}
    if RESULTS.exists():
        try:
            data = json.loads(RESULTS.read_text())
        except ValueError:
            data = {}
    data["math"] = {
        **res,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
    }
    RESULTS.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
