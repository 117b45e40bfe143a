"""Head to head, a section of bench/verifiers.py (`--only math_vs_math_verify`): this project's math
verifier against Hugging Face's math-verify on the same inputs, in one process, case by case (see
bench/verifiers.py's docstring and posttrain/rewards/math/README.md for the recorded numbers).
Needs the `bench` extra (math-verify)."""
from __future__ import annotations

import signal
import statistics
import time

from verifiers import _count_by_category, _pct, _test_module, _wait_worker_ready, math_cases

from posttrain.rewards.math import MATH_VERIFIER_VERSION, verify_math

MATH_VERIFY_INSTALL = ".venv/bin/pip install -e '.[bench]'  (or: .venv/bin/pip install 'math-verify==0.9.0')"
_HANG_S = 600  # a math-verify call past this (its signal alarm could not interrupt it) ends the run
_RETRIES_AFTER_STOP = 3
_CONTINUED = [0]  # SIGCONTs received: the process was stopped (on a shared machine) and resumed


def _on_sigcont(*_) -> None:
    _CONTINUED[0] += 1


def _math_verify_arms() -> dict:
    """math-verify run as open-r1's `accuracy_reward` runs it (TRL's is the same bar the normalisation
    flags): the gold parsed with the default extraction, the answer with LaTeX extraction only, boxed
    first; a gold that does not parse gives None (open-r1 skips the example), as does an exception from
    `verify`.  A second arm wraps the bare gold in \\boxed{} first (as verl does for bare answers), so
    that a gold string such as `x^2+2x+1`, which the default extraction cannot read, is not what decides."""
    import logging
    from importlib.metadata import version

    try:
        from latex2sympy2_extended import NormalizationConfig
        from math_verify import LatexExtractionConfig, parse, verify
    except ImportError:
        raise SystemExit(f"section math_vs_math_verify needs math-verify; install it with\n    {MATH_VERIFY_INSTALL}")
    # one log line per parse ("equations=True ... is deprecated") and per timeout: silenced, not timed
    logging.getLogger("latex2sympy2_extended").setLevel(logging.CRITICAL)
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    answer_config = [LatexExtractionConfig(
        normalization_config=NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True,
                                                 equations=True, boxed="all", units=True),
        boxed_match_priority=0, try_extract_without_anchor=False)]

    def open_r1(response: str, gold: str) -> float | None:
        gold_parsed = parse(gold, extraction_mode="first_match")
        if len(gold_parsed) == 0:
            return None
        answer_parsed = parse(response, extraction_config=answer_config, extraction_mode="first_match")
        return float(verify(gold_parsed, answer_parsed))  # open-r1 turns an exception into None

    return {"math_verify": (f"math-verify {version('math-verify')}, open-r1 accuracy_reward", open_r1),
            "math_verify_boxed_gold": (f"math-verify {version('math-verify')}, open-r1 accuracy_reward, "
                                       "gold wrapped in \\boxed{}",
                                       lambda response, gold: open_r1(response, f"\\boxed{{{gold}}}"))}


def _h2h_cases(n: int, seed: int) -> dict[str, list[tuple[str, str, str, float | None]]]:
    """(name, response, gold, reward it deserves or None: not scored) by group; the same inputs the
    other math sections give this verifier."""
    tm = _test_module()
    think = "<think>" + ("Let me compute step by step. 7+8=15, carry the 1. " * 400) + "</think>"
    poly = "+".join(f"{k + 1}a^{{{k}}}b" for k in range(40))
    boxes_48 = " ".join(f"\\boxed{{{poly}+(a+b+c+d+e+f)^6+{i}-{i}}}" for i in range(48))
    return {
        "golden": [(name, resp, gold, reward) for name, resp, gold, reward, _ in tm.GOLDEN],
        "false_positives": [(f"{name}/{wrap}", fn(answer), gold, 0.0)
                            for name, answer, gold, _ in tm.FALSE_POSITIVES for wrap, fn in tm.WRAPS.items()],
        "adversarial_cas": [(f"{k}/{gold}", tm.B(answer), gold, 0.0)
                            for k, answer in enumerate(tm.ADVERSARIAL) for gold in ("1", "x+1", "\\sin(x)")],
        "long_inputs": [
            ("response_20k_chars_right", think + "So \\boxed{85}.", "85", 1.0),
            ("response_20k_chars_wrong", think + "So \\boxed{84}.", "85", 0.0),
            ("response_20k_chars_unclosed_think", think[:-len("</think>")], "85", 0.0),
            ("response_2MB_one_box", "x" * 2_000_000 + "\\boxed{3}", "3", 1.0),
            ("48_boxes_long_polynomials", boxes_48, poly, 0.0),
            ("2000_boxes", tm._equal_polynomial_boxes(2000), "(a+b+c+d+e+f)^6", None),
            ("1MB_response_30000_boxes", tm._equal_polynomial_boxes(30_000), "(a+b+c+d+e+f)^6", None),
        ],
        "mix": [(f"{cat}/{k}", resp, gold, expected)
                for k, (cat, resp, gold, expected) in enumerate(math_cases(n, seed))],
    }


def _latency(xs: list[float]) -> dict:
    return {"mean": round(statistics.mean(xs) * 1e3, 3), "median": round(statistics.median(xs) * 1e3, 3),
            "p99": round(_pct(xs, 0.99) * 1e3, 3), "max": round(max(xs) * 1e3, 3)}


def bench_math_vs_math_verify(n: int = 600, seed: int = 0) -> dict:
    """This verifier and math-verify on the same inputs, in one process, case by case: each case is
    scored by every arm before the next case (the arm that goes first rotates), each call timed alone.
    Reward None (math-verify skipping an example whose gold it cannot parse) counts as not paid:
    right where 0 is deserved, wrong where 1 is.  A call during which the process was stopped and
    resumed (SIGCONT: another job on a shared machine pausing it) is called again, up to 3 times, and
    counted under retimed_after_stop; its reward and time are the uninterrupted call's."""
    import faulthandler

    def ours(response: str, gold: str) -> float:
        return verify_math(response, gold).reward

    t0 = time.perf_counter()
    mv = _math_verify_arms()
    import_s = time.perf_counter() - t0
    arms = {"posttrain": (f"posttrain {MATH_VERIFIER_VERSION}", ours), **mv}
    _wait_worker_ready()  # both warm before the clock: the sympy worker, and math-verify's ANTLR parser
    t0 = time.perf_counter()
    mv["math_verify"][1]("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}")
    first_call_s = time.perf_counter() - t0

    groups = _h2h_cases(n, seed)
    names = list(arms)
    out: dict = {"how": "math-verify as open-r1's accuracy_reward calls it; every case scored by every arm "
                        "in one process, interleaved (the first arm rotates), one timed call each (called again "
                        "if the process was stopped and resumed during it)",
                 "arms": {a: arms[a][0] for a in names},
                 "math_verify_import_s": round(import_s, 3), "math_verify_first_call_s": round(first_call_s, 3),
                 "groups": {}}
    lat_all: dict[str, list[float]] = {a: [] for a in names}
    retimed = {a: 0 for a in names}
    old_cont = signal.signal(signal.SIGCONT, _on_sigcont)
    k = 0
    for group, cases in groups.items():
        rec = {a: {"lat": [], "right": 0, "scored": 0, "wrong": [], "paid_wrong": [], "none": 0,
                   "exceptions": {}, "over_1s": []} for a in names}
        for name, response, gold, expected in cases:
            order = names[k % len(names):] + names[:k % len(names)]
            k += 1
            for a in order:
                fn = arms[a][1]
                for attempt in range(1 + _RETRIES_AFTER_STOP):
                    seen, raised = _CONTINUED[0], None
                    faulthandler.dump_traceback_later(_HANG_S, exit=True)
                    t0 = time.perf_counter()
                    try:
                        reward = fn(response, gold)
                    except Exception as e:  # counted; open-r1 would score the example None
                        reward, raised = None, type(e).__name__
                    dt = time.perf_counter() - t0
                    faulthandler.cancel_dump_traceback_later()
                    if _CONTINUED[0] == seen:
                        break
                    retimed[a] += 1
                r = rec[a]
                if raised:
                    r["exceptions"][raised] = r["exceptions"].get(raised, 0) + 1
                r["lat"].append(dt)
                lat_all[a].append(dt)
                r["none"] += reward is None
                if dt >= 1.0:
                    r["over_1s"].append(name)
                if expected is None:
                    continue
                r["scored"] += 1
                if (reward or 0.0) == expected:
                    r["right"] += 1
                else:
                    r["wrong"].append(name)
                    if expected == 0.0:
                        r["paid_wrong"].append(name)
        out["groups"][group] = {
            a: {"cases": len(cases), "scored": r["scored"],
                "accuracy": round(r["right"] / r["scored"], 4) if r["scored"] else None,
                "paid_1_when_0_deserved": len(r["paid_wrong"]), "reward_none": r["none"],
                "exceptions": sum(r["exceptions"].values()), "exception_types": r["exceptions"],
                "calls_over_1s": len(r["over_1s"]), "latency_ms": _latency(r["lat"]),
                "wrong": r["wrong"] if group != "mix" else _count_by_category(r["wrong"]),
                "over_1s": r["over_1s"] if group != "mix" else _count_by_category(r["over_1s"])}
            for a, r in rec.items()}
    signal.signal(signal.SIGCONT, old_cont)
    g = out["groups"]
    out["summary"] = {
        a: {"golden_accuracy": g["golden"][a]["accuracy"], "golden_wrong": len(g["golden"][a]["wrong"]),
            "mix_accuracy": g["mix"][a]["accuracy"],
            "false_positive_probes_paid": g["false_positives"][a]["paid_1_when_0_deserved"],
            "adversarial_cas_paid": g["adversarial_cas"][a]["paid_1_when_0_deserved"],
            "calls": len(lat_all[a]),
            "calls_over_1s": sum(g[grp][a]["calls_over_1s"] for grp in g),
            "exceptions": sum(g[grp][a]["exceptions"] for grp in g),
            "reward_none": sum(g[grp][a]["reward_none"] for grp in g),
            "latency_ms": _latency(lat_all[a]), "retimed_after_stop": retimed[a]}
        for a in names}
    return out


def print_math_vs_math_verify(res: dict) -> None:
    arms = list(res["arms"])
    print("head to head, one process, interleaved: " + "; ".join(f"{a} = {d}" for a, d in res["arms"].items()))
    print(f"math-verify import {res['math_verify_import_s']} s, first call {res['math_verify_first_call_s']} s")
    print(f"{'group / arm':34s} {'n':>4s} {'acc':>7s} {'paid 1':>7s} {'None':>5s} {'exc':>4s} {'>=1s':>5s} "
          f"{'mean ms':>9s} {'med ms':>8s} {'max ms':>9s}")
    for group, by_arm in res["groups"].items():
        for a in arms:
            r = by_arm[a]
            acc = "-" if r["accuracy"] is None else f"{r['accuracy']:.4f}"
            lm = r["latency_ms"]
            print(f"{group + ' / ' + a:34s} {r['cases']:4d} {acc:>7s} {r['paid_1_when_0_deserved']:7d} "
                  f"{r['reward_none']:5d} {r['exceptions']:4d} {r['calls_over_1s']:5d} {lm['mean']:9.3f} "
                  f"{lm['median']:8.3f} {lm['max']:9.1f}")
    for a, s in res["summary"].items():
        print(f"{a:24s} {s}")
