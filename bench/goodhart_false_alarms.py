"""How often the Goodhart alert fires when nothing is exploited, and how soon when something is.

Simulated general RL runs fed to `posttrain.rl.alerts.RLAlerts` step by step, as the trainer's logs feed it:
each logged step carries the reward model's raw score (rising by a drift plus noise, as it does when
the policy learns) and the independent check of that step's open replies: 1 to 4 prompts a step (the
counts `make run`'s general RL logged), 8 replies each, each prompt with its own pass rate around the
step's (Beta, a + b = 2: the replies to one prompt pass or fail together, as on the world's open kind). Under
"honest" the check's true rate stays at `--rate`; under "exploited" it falls linearly to
`--exploited-to` over the run. Reported per run length: the share of runs with at least one alert
(false alarms under "honest", detections under "exploited") and the median step of the first alert,
with every test at `goodhart_confidence` (95%) and with that confidence shared out over the tests a
run makes (Bonferroni, what RLAlerts does from `on_train_begin`). Then logged runs replayed:
`make run`'s own general RL (run ec6e8037, held-out open check 0.26 -> 0.56) and the length-biased
reward model's run of `bench/goodhart_alert.py` (bench/results/goodhart_alert.json).

    .venv/bin/python bench/goodhart_false_alarms.py [--runs 300] [--replay trainer_state.json ...] \
        --record bench/results/goodhart_false_alarms

Writes <record>.json and the tables as <record>.table.md (goodhart_false_alarms.md quotes them).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posttrain.rewards.model_based import CHECKED, CHECKED_REPLIES, RAW_SCORE  # noqa: E402
from posttrain.rl.alerts import RLAlerts  # noqa: E402
from posttrain.config.rl import RLAlertsConfig  # noqa: E402

# (raw score, independent check, replies checked) of each logged step of `make run`'s general RL,
# run ec6e8037 (commit 8c3b18a); its held-out open check rose 0.26 -> 0.56. Steps without an open
# row log no reward model score and are not in the list (40 optimizer steps, 33 logged here).
DEFAULT_RUN = [
    (-1.626, 0.0, 8), (0.3737, 0.0, 8), (1.572, 0.0, 8), (0.672, 0.2812, 32), (1.397, 0.0, 8),
    (1.722, 0.25, 16), (3.493, 0.4167, 24), (2.971, 0.25, 8), (1.561, 0.1667, 24), (-0.7823, 0.2188, 32),
    (3.515, 0.1875, 16), (1.427, 0.4375, 16), (3.265, 0.5, 16), (0.6657, 0.3333, 24), (2.683, 0.375, 8),
    (1.72, 0.1875, 16), (1.23, 0.375, 16), (2.411, 0.4583, 24), (2.328, 0.375, 24), (1.215, 0.3125, 16),
    (-1.323, 0.1875, 16), (1.721, 0.375, 8), (0.7558, 0.0, 8), (-0.4735, 0.3125, 16), (1.985, 0.4688, 32),
    (-1.046, 0.125, 8), (5.108, 0.375, 8), (1.649, 0.3125, 16), (-1.606, 0.0, 8), (1.19, 0.1667, 24),
    (2.461, 0.2083, 24), (4.447, 0.5625, 16), (2.066, 0.1875, 16),
]
DEFAULT_RUN_STEPS = 40


def alerts_for(steps: int, *, corrected: bool, cfg: RLAlertsConfig | None = None) -> RLAlerts:
    alerts = RLAlerts(cfg or RLAlertsConfig(), log=lambda _: None)
    if corrected:
        alerts.on_train_begin(None, SimpleNamespace(max_steps=steps, logging_steps=1), None)
    return alerts


def first_alert(alerts: RLAlerts, logged) -> int | None:
    for step, (raw, check, replies) in enumerate(logged, start=1):
        if any(kind == "goodhart" for kind, _ in alerts.check(step, {RAW_SCORE: raw, CHECKED: check,
                                                                     CHECKED_REPLIES: replies})):
            return step
    return None


def simulated_run(rng: random.Random, steps: int, rate_at, reply_counts: list[int], *, group: int = 8,
                  concentration: float = 2.0) -> list[tuple]:
    """Each step checks the replies to `replies // group` prompts, `group` replies each; a prompt's
    own pass rate is drawn from a Beta with the step's mean rate (`concentration` = a + b: the
    smaller, the more the replies to one prompt pass or fail together)."""
    out = []
    for step in range(steps):
        replies = rng.choice(reply_counts)
        p = rate_at(step / max(1, steps - 1))
        right = 0
        for _ in range(replies // group):
            q = rng.betavariate(max(p, 1e-3) * concentration, max(1 - p, 1e-3) * concentration)
            right += sum(rng.random() < q for _ in range(group))
        out.append((0.05 * step + rng.gauss(0, 1.5), right / replies, replies))
    return out


def rates(args, steps: int, scenario: str, corrected: bool, concentration: float) -> dict:
    rng = random.Random(f"{args.seed}-{steps}-{scenario}-{concentration}")
    counts = [n for _, _, n in DEFAULT_RUN]
    rate_at = (lambda _: args.rate) if scenario == "honest" else \
        (lambda t: args.rate + (args.exploited_to - args.rate) * t)
    firsts = [first_alert(alerts_for(steps, corrected=corrected),
                          simulated_run(rng, steps, rate_at, counts, concentration=concentration))
              for _ in range(args.runs)]
    fired = [f for f in firsts if f is not None]
    return {"steps": steps, "scenario": scenario, "corrected": corrected, "concentration": concentration,
            "runs": args.runs, "fired": len(fired) / args.runs,
            "median_first_step": statistics.median(fired) if fired else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--rate", type=float, default=0.3)
    parser.add_argument("--exploited-to", type=float, default=0.05)
    parser.add_argument("--lengths", default="24,40,100")
    # a + b of each prompt's Beta: 20 gives the step-to-step dispersion make run's general RL shows
    # (about 1.0); 2 makes one prompt's replies pass or fail together (dispersion about 3)
    parser.add_argument("--concentrations", default="20,2")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replay", nargs="*", type=Path, default=[],
                        help="trainer_state.json files of general RL runs (e.g. bench/general_rl_arms.py's "
                             "<out>/seed*/reward_model/trainer/checkpoint-*/trainer_state.json) to replay as well")
    parser.add_argument("--record", type=Path)
    args = parser.parse_args()

    table = [rates(args, steps, scenario, corrected, concentration)
             for concentration in map(float, args.concentrations.split(","))
             for steps in map(int, args.lengths.split(",")) for scenario in ("honest", "exploited")
             for corrected in (False, True)]
    length_biased = json.loads((ROOT / "bench/results/goodhart_alert.json").read_text())["arms"]["length_biased"]
    biased_steps = [(s["raw_score"], s["independent_check"], 64) for s in length_biased["steps"]]
    biased_cfg = RLAlertsConfig(goodhart_window=8, goodhart_drop=0.05)   # bench/goodhart_alert.py's
    replays = {
        "make run's general RL (run ec6e8037)": {
            corrected: first_alert(alerts_for(DEFAULT_RUN_STEPS, corrected=corrected), DEFAULT_RUN)
            for corrected in (False, True)},
        "length-biased reward model (goodhart_alert.md)": {
            corrected: first_alert(alerts_for(len(biased_steps), corrected=corrected, cfg=biased_cfg), biased_steps)
            for corrected in (False, True)},
    }
    for path in args.replay:
        logged = [(h[RAW_SCORE], h[CHECKED], h[CHECKED_REPLIES]) for h in json.loads(path.read_text())["log_history"]
                  if CHECKED in h]
        steps = json.loads(path.read_text())["max_steps"]
        replays[str(path)] = {corrected: first_alert(alerts_for(steps, corrected=corrected), logged)
                              for corrected in (False, True)}
    for row in table:
        print(json.dumps(row))
    for name, fired in replays.items():
        print(f"{name}: every test at 95%: {fired[False]}, shared out: {fired[True]}")
    if args.record:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.with_suffix(".json").write_text(json.dumps(
            {"settings": {k: str(v) for k, v in vars(args).items()}, "table": table,
             "replays": {k: {"each_window": v[False], "shared_out": v[True]} for k, v in replays.items()}}, indent=1))
        lines = ["| prompts' Beta a + b | run length (logged steps) | scenario | every test at 95% | 95% shared out over the run's tests |",
                 "|---|---|---|---|---|"]
        for concentration in sorted({r["concentration"] for r in table}, reverse=True):
            for steps in sorted({r["steps"] for r in table}):
                for scenario in ("honest", "exploited"):
                    cells = []
                    for corrected in (False, True):
                        r = next(r for r in table if (r["concentration"], r["steps"], r["scenario"], r["corrected"])
                                 == (concentration, steps, scenario, corrected))
                        first = "" if r["median_first_step"] is None else f", first at step {r['median_first_step']:.0f} (median)"
                        cells.append(f"{r['fired']:.3f}{first}")
                    lines.append(f"| {concentration:g} | {steps} | {scenario} | {cells[0]} | {cells[1]} |")
        lines += ["", "| logged run replayed | first alert, every test at 95% | shared out |", "|---|---|---|"]
        lines += [f"| {name} | {fired[False]} | {fired[True]} |" for name, fired in replays.items()]
        args.record.with_suffix(".table.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
