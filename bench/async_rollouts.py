"""Rollouts ahead of training (issue 42) on the embedded world: reasoning RL from one cold-start
checkpoint with each arm's `trainer.rollouts` settings, over seeds. Per run: wall time per step, the
share of generation hidden behind training (`rollout/hidden`), how long the trainer waited, the
staleness trained on, importance-ratio statistics, the reward curve and KL, and (unless
--no-evaluate) held-out math accuracy. Mean and 95% t-interval over seeds per arm.

    .venv/bin/python bench/async_rollouts.py --config configs/tools.yaml \
        --parent runs/tools/<run>/cold_start_sft/checkpoint --seeds 0 1 2 --record bench/results/async_rollouts
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from posttrain.env import configure_offline

configure_offline()
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rl_experiments import arm_config, t_interval  # noqa: E402
from stage_data import prepared_data, stage_inputs  # noqa: E402

from posttrain.registry.checkpoint import directory_digest  # noqa: E402
from posttrain.evaluation.suites import evaluate  # noqa: E402
from posttrain.schema import CheckpointRef  # noqa: E402

# On 2 cores: sync trains and generates on both in turn; async gives the trainer one and the
# generator process the other.
ASYNC = {"trainer.rollouts": "async", "trainer.threads": 1, "trainer.rollout_threads": 1}
ARMS: dict[str, dict] = {
    "sync": {"trainer.threads": 2},
    "async_s1": {**ASYNC, "trainer.max_staleness": 1},
    "async_s2": {**ASYNC, "trainer.max_staleness": 2},
    "async_s2_no_is": {**ASYNC, "trainer.max_staleness": 2, "trainer.importance_sampling": "none"},
    "async_s2_partial": {**ASYNC, "trainer.max_staleness": 2, "trainer.partial_rollout_tokens": 48},
}
LOGGED = ("reward", "kl", "rollout/hidden", "rollout/resumed_rows", "rollout/wait_s", "rollout/generate_s", "rollout/batch_staleness",
          "rollout/is_ratio/mean", "rollout/is_ratio/max", "rollout/is_ratio/clipped", "rollout/is_ratio/abs_log_diff",
          "step_time")


def run(config: str, parent: CheckpointRef, arm: str, seed: int, extra: dict, evaluate_after: bool) -> dict:
    from stages import reasoning_rl

    cfg = arm_config(config, ARMS[arm], extra)
    stage = cfg.stage("reasoning_rl")
    data = prepared_data(cfg, ("reasoning_rl",))
    with tempfile.TemporaryDirectory() as tmp:
        started = time.time()
        result = reasoning_rl.run(stage, stage_inputs(cfg, "reasoning_rl", data, work_dir=tmp, parent=parent, seed=seed))
        train_s = time.time() - started
        record = {"arm": arm, "seed": seed, "train_s": train_s, "steps": stage.trainer.max_steps,
                  "s_per_step": train_s / stage.trainer.max_steps, "policies": result.policies,
                  "means": {k: statistics.fmean(r[k] for r in result.train_log if k in r)
                            for k in LOGGED if any(k in r for r in result.train_log)},
                  "reward_curve": [[r["step"], r["reward"]] for r in result.train_log if "reward" in r]}
        if evaluate_after:
            math = {k: v for k, v in data.suites.items() if k == "math"}
            record["math/accuracy"] = evaluate(result.checkpoint, cfg, suites=math, desc=f"{arm} seed {seed}").metrics["math/accuracy"]
    print(json.dumps({k: v for k, v in record.items() if k != "reward_curve"}), flush=True)
    return record


def markdown(runs: list[dict], meta: dict) -> str:
    lines = ["# Rollouts ahead of training on 2 CPU cores", "", meta["command"], "",
             f"Parent `{meta['parent']}`, {meta['steps']} reasoning-RL steps per run, seeds {meta['seeds']}, "
             f"machine {meta['machine']}. Mean and 95% t-interval over seeds.", "",
             "| arm | s / step | hidden share of generation | trainer wait s / step | staleness | IS ratio mean | IS max | "
             "clipped | reward | KL to start | held-out math |", "|---|---|---|---|---|---|---|---|---|---|---|"]

    def cell(values):
        if not values:
            return "–"
        if len(values) == 1:
            return f"{values[0]:.3f}"
        mean, low, high = t_interval(values)
        return f"{mean:.3f} [{low:.3f}, {high:.3f}]"

    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        if not mine:
            continue
        means = lambda key: [r["means"][key] for r in mine if key in r["means"]]  # noqa: E731
        lines.append(f"| {arm} | {cell([r['s_per_step'] for r in mine])} | {cell(means('rollout/hidden'))} | "
                     f"{cell(means('rollout/wait_s'))} | {cell(means('rollout/batch_staleness'))} | "
                     f"{cell(means('rollout/is_ratio/mean'))} | {cell(means('rollout/is_ratio/max'))} | "
                     f"{cell(means('rollout/is_ratio/clipped'))} | {cell(means('reward'))} | {cell(means('kl'))} | "
                     f"{cell([r['math/accuracy'] for r in mine if 'math/accuracy' in r])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--parent", required=True, type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", choices=sorted(ARMS), default=list(ARMS))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--no-evaluate", action="store_true")
    parser.add_argument("--record", type=Path, help="write <record>.json and <record>.md")
    args = parser.parse_args()
    import platform

    extra = {"stages.reasoning_rl.trainer.max_steps": args.steps, "stages.reasoning_rl.probe_every": 0}
    parent = CheckpointRef(path=str(args.parent.absolute()), digest=directory_digest(args.parent))
    runs = [run(args.config, parent, arm, seed, extra, not args.no_evaluate) for arm in args.arms for seed in args.seeds]
    meta = {"command": "`.venv/bin/python " + " ".join(sys.argv) + "`", "parent": str(args.parent), "steps": args.steps,
            "seeds": args.seeds, "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"}
    if args.record:
        args.record.with_suffix(".json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=1))
        args.record.with_suffix(".md").write_text(markdown(runs, meta))
    print(markdown(runs, meta))


if __name__ == "__main__":
    main()
