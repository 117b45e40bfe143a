"""General RL with model-based rewards against rules alone (issue 29, item 6): three arms, several
seeds, from one run's mode-fusion checkpoint.

    (a) rules:        the rule rewards only; the open-ended prompts left out (nothing could pay them)
    (b) reward_model: (a) plus the open-ended prompts paid by the run's reward model (the default chain)
    (c) judge:        (a) plus the open-ended prompts paid by the world's judge (bench/world_judge.py)

Every arm is general RL's recipe with the config's settings (steps, batch, learning rate, the rule
rewards' weights) and gets the config's full held-out evaluation. The open-ended suite is scored by
the independent check (every stated equation true, the sum stated), never by a model. Reported per
arm: means over seeds with 95% t-intervals, and (b)-(a), (c)-(a) as paired item-level differences
pooled over seeds (95% CI); the earlier capabilities' gates (math, /no_think, instruction) beside.

    .venv/bin/python bench/general_rl_arms.py --run runs/<run> --judge data/judge --seeds 3 \
        --out /tmp/arms --record bench/results/general_rl_arms
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from posttrain.env import configure_offline

configure_offline()
sys.path.insert(0, str(Path(__file__).resolve().parent))

from stage_data import arms_plot, mean_ci, paired_against, prepared_data, stage_inputs  # noqa: E402

from posttrain.registry.checkpoint import directory_digest  # noqa: E402
from posttrain.config.loading import load_config  # noqa: E402
from posttrain.data.files import file_md5, read_jsonl, write_jsonl  # noqa: E402
from posttrain.evaluation.suites import evaluate  # noqa: E402
from posttrain.schema import CheckpointRef, DatasetRef  # noqa: E402

ARMS = ("rules", "reward_model", "judge")
METRICS = ("open/accuracy", "instruction/accuracy", "math/accuracy", "no_think/mode_compliance", "direct/accuracy")


def ref(path: Path) -> CheckpointRef:
    return CheckpointRef(path=str(path.absolute()), digest=directory_digest(path))


def without_open(source: DatasetRef, out: Path) -> DatasetRef:
    rows = [r for r in read_jsonl(Path(source.path)) if r.get("kind") != "open"]
    write_jsonl(rows, out)
    return DatasetRef(name=source.name, path=str(out), md5=file_md5(out), rows=len(rows))


def arm_config(cfg, arm: str, judge: Path | None):
    from posttrain.config.rl import JudgeConfig
    from posttrain.world.open_tasks import JUDGE_MAX_NEW_TOKENS, JUDGE_TEMPLATE

    base = cfg.stage("general_rl")
    rules = base.rewards.model_copy(update={"reward_model": 0.0, "judge": 0.0})
    if arm == "rules":
        return base.model_copy(update={"rewards": rules, "judge": None})
    if arm == "reward_model":
        return base.model_copy(update={"rewards": rules.model_copy(update={"reward_model": 1.0}), "judge": None})
    return base.model_copy(update={"rewards": rules.model_copy(update={"judge": 1.0}),
                                   "judge": JudgeConfig(model=str(judge), template=JUDGE_TEMPLATE,
                                                        max_new_tokens=JUDGE_MAX_NEW_TOKENS,
                                                        batch_size=64)})


def run_seed(cfg, data, fusion: CheckpointRef, reward_model: CheckpointRef, judge: Path, seed: int, out: Path,
             arms: tuple[str, ...]) -> dict:
    from stages import general_rl

    measured: dict[str, dict] = {}
    for arm in arms:
        done = out / f"{arm}.json"   # an arm measured before in this --out is read back, not trained again
        if done.is_file():
            measured[arm] = json.loads(done.read_text())
            continue
        inputs = stage_inputs(cfg, "general_rl", data, work_dir=out / arm, parent=fusion, seed=seed,
                              reward_model=reward_model if arm == "reward_model" else None)
        if arm == "rules":
            inputs.data["general_prompts"] = without_open(inputs.data["general_prompts"], out / "rules_prompts.jsonl")
        started = time.time()
        result = general_rl.run(arm_config(cfg, arm, judge), inputs)
        wall = time.time() - started
        evaluation = evaluate(result.checkpoint, cfg, suites=data.suites, desc=f"seed {seed} {arm}")
        measured[arm] = {"wall_s": wall, "alerts": result.alerts,
                         "paid_open": result.train_metrics.get("reward_by_kind/open"),
                         "metrics": {m: evaluation.metrics[m] for m in METRICS if m in evaluation.metrics},
                         "per_item": {m: evaluation.per_item[m] for m in METRICS if m in evaluation.per_item}}
        done.write_text(json.dumps(measured[arm]))
        print(json.dumps({seed: {arm: measured[arm]["metrics"]}}), flush=True)
    return measured


def summarise(per_seed: dict, arms: tuple[str, ...], confidence: float = 0.95) -> dict:
    summary: dict = {"arms": {}, "paired_vs_rules": {}}
    for arm in arms:
        summary["arms"][arm] = {m: mean_ci([per_seed[s][arm]["metrics"][m] for s in per_seed]) for m in METRICS
                                if all(m in per_seed[s][arm]["metrics"] for s in per_seed)}
        summary["arms"][arm]["wall_s"] = mean_ci([per_seed[s][arm]["wall_s"] for s in per_seed])
    for arm in arms:
        if arm != "rules" and "rules" in arms:
            summary["paired_vs_rules"][arm] = paired_against(per_seed, arm, "rules", METRICS, confidence)
    return summary


def markdown(summary: dict, per_seed: dict, meta: dict) -> str:
    fmt = lambda t: f"{t[0]:.3f} [{t[1]:.3f}, {t[2]:.3f}]"  # noqa: E731
    metrics = [m for m in METRICS if all(m in summary["arms"][a] for a in summary["arms"])]
    lines = ["# General RL: reward model vs judge vs rules alone", "",
             f"From run `{meta['run']}`'s mode-fusion checkpoint; judge `{meta['judge']}`; seeds {meta['seeds']}; "
             f"recorded {meta['recorded']}. Means over seeds with 95% t-intervals; `open/accuracy` is the "
             "independent check.", "",
             "| arm | " + " | ".join(metrics) + " | wall s |", "|---|" + "---|" * (len(metrics) + 1)]
    for arm, row in summary["arms"].items():
        lines.append(f"| {arm} | " + " | ".join(fmt(row[m]) for m in metrics) + f" | {row['wall_s'][0]:.0f} |")
    lines += ["", "Paired item-level differences against `rules`, pooled over seeds (95% CI):", "",
              "| arm | " + " | ".join(metrics) + " |", "|---|" + "---|" * len(metrics)]
    for arm, diffs in summary["paired_vs_rules"].items():
        lines.append(f"| {arm} | " + " | ".join(f"{diffs[m][0]:+.3f} [{diffs[m][1]:+.3f}, {diffs[m][2]:+.3f}]"
                                               if m in diffs else "–" for m in metrics) + " |")
    lines += ["", "Per seed:", "", "| seed | arm | " + " | ".join(metrics) + " | wall s | alerts |",
              "|---|---|" + "---|" * (len(metrics) + 2)]
    for seed, arms in per_seed.items():
        for arm, a in arms.items():
            lines.append(f"| {seed} | {arm} | " + " | ".join(f"{a['metrics'][m]:.3f}" for m in metrics)
                         + f" | {a['wall_s']:.0f} | {'; '.join(a['alerts']) or '–'} |")
    return "\n".join(lines) + "\n"


def plot(summary: dict, path: Path) -> None:
    metrics = [m for m in METRICS if all(m in r for r in summary["arms"].values())]
    arms_plot(summary["arms"], metrics, path, title="General RL arms (open: independent check)",
              ylabel="held-out score (mean over seeds, 95% CI)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--run", required=True, type=Path, help="a run with mode_fusion_sft and reward_model stages")
    parser.add_argument("--judge", type=Path, default=Path("data/judge"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--record", type=Path, help="write <record>.json/.md/.png")
    args = parser.parse_args()
    arms = tuple(args.arms.split(","))
    cfg = load_config(args.config)
    data = prepared_data(cfg, ("general_rl",))
    fusion = ref(args.run / "mode_fusion_sft" / "checkpoint")
    reward_model = ref(args.run / "reward_model" / "reward_model")
    per_seed = {}
    for i in range(args.seeds):
        seed = cfg.seed + i
        per_seed[seed] = run_seed(cfg, data, fusion, reward_model, args.judge.absolute(), seed,
                                  (args.out / f"seed{seed}").absolute(), arms)
    summary = summarise(per_seed, arms)
    meta = {"run": str(args.run), "judge": str(args.judge), "seeds": list(per_seed),
            "recorded": time.strftime("%Y-%m-%d %H:%M")}
    print(markdown(summary, per_seed, meta))
    if args.record:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        slim = {s: {a: {k: v for k, v in m.items() if k != "per_item"} for a, m in arms_.items()} for s, arms_ in per_seed.items()}
        Path(f"{args.record}.json").write_text(json.dumps({"meta": meta, "summary": summary, "per_seed": slim}, indent=1) + "\n")
        Path(f"{args.record}.md").write_text(markdown(summary, per_seed, meta))
        plot(summary, Path(f"{args.record}.png"))


if __name__ == "__main__":
    main()
