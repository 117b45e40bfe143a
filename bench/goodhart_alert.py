"""A deliberately length-biased reward model makes the Goodhart alert fire in a real GRPO run.

The reward model is trained with the reward_model stage's recipe (TRL's RewardTrainer, the world's
student base) on the world's preference pairs turned around: the chosen reply is the longer, wrong
one (the swapped equation said twice), the rejected one the short, true reply. General RL's recipe
then runs a short GRPO from a run's mode-fusion checkpoint on the open-ended prompts with that
reward model as the only reward. Each step logs the reward model's raw score and the independent
check of the same replies (posttrain.rewards.model_based); `RLAlerts` must fire `goodhart` when the
first rises while the second falls. The control arm trains the same way with the world's true
reward model (the preference pairs as given): its alert must stay silent.

    .venv/bin/python bench/goodhart_alert.py --run runs/<run> [--steps 24]

Writes bench/results/goodhart_alert.json, .md and .png.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from posttrain.data.files import file_md5, read_jsonl, write_jsonl  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def length_biased(pairs: list[dict]) -> list[dict]:
    """Each pair turned around: chosen the rejected (swapped) reply with its equation said twice."""
    out = []
    for row in pairs:
        wrong = row["rejected"][0]["content"]
        equation = wrong.rsplit("\n", 1)[-1]
        out.append({**row, "chosen": [{"role": "assistant", "content": f"{wrong}, {equation}"}],
                    "rejected": row["chosen"]})
    return out


def _ref(name: str, path: Path):
    from posttrain.schema import DatasetRef

    return DatasetRef(name=name, path=str(path), md5=file_md5(path))


def arm(name: str, pairs: list[dict], run: Path, work: Path, args) -> dict:
    from posttrain.config.pipeline import GeneralRLConfig, PipelineConfig, RewardModelConfig, RewardModelTrainerConfig
    from posttrain.config.rl import RewardWeights, RLAlertsConfig
    from posttrain.schema import CheckpointRef, StageInputs
    from posttrain.config.trainers import GRPOTrainerConfig
    from stages import general_rl, reward_model

    settings = PipelineConfig().base.settings()
    fusion = CheckpointRef(path=str((run / "mode_fusion_sft" / "checkpoint").absolute()), digest=f"{run.name}/mode_fusion_sft")
    student = CheckpointRef(path=str(ROOT / "data" / "student_base"), digest="world-student-base")
    write_jsonl(pairs, work / f"{name}_pairs.jsonl")
    rm = reward_model.run(
        RewardModelConfig(trainer=RewardModelTrainerConfig(learning_rate=1e-3, epochs=1, batch_size=16, max_length=256)),
        StageInputs(work_dir=str(work / f"{name}_rm"), parent=fusion, reward_model=student, model=settings, seed=args.seed,
                    data={"preferences": _ref("preferences", work / f"{name}_pairs.jsonl")}))
    config = GeneralRLConfig(
        rewards=RewardWeights(correctness=0, format=0, reward_model=1.0),
        alerts=RLAlertsConfig(goodhart_window=args.window, goodhart_drop=args.drop),
        trainer=GRPOTrainerConfig(learning_rate=args.learning_rate, max_steps=args.steps, prompts_per_step=8,
                                  num_generations=8, max_completion_length=144))
    prompts = work / "open_prompts.jsonl"   # general RL's prompts as the flow prepares them, the open kind's only
    write_jsonl([r for r in read_jsonl(Path(args.prepared_prompts)) if r["kind"] == "open"], prompts)
    result = general_rl.run(config, StageInputs(
        work_dir=str(work / f"{name}_rl"), parent=fusion, reward_model=rm.reward_model, model=settings, seed=args.seed,
        data={"general_prompts": _ref("general_prompts", prompts)}))
    from posttrain.rewards.model_based import CHECKED, RAW_SCORE

    steps = [{"step": e["step"], "raw_score": e[RAW_SCORE], "independent_check": e[CHECKED],
              "length": e.get("completions/mean_length")} for e in result.train_log if RAW_SCORE in e and CHECKED in e]
    return {"reward_model": {k: rm.train_metrics.get(k) for k in ("pairwise_accuracy", "length_correlation",
                                                                   "accuracy_shorter_chosen")},
            "alerts": result.alerts, "goodhart_fired": any("Goodhart" in a for a in result.alerts), "steps": steps}


def plot(arms: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, measured in arms.items():
        steps = [s["step"] for s in measured["steps"]]
        axes[0].plot(steps, [s["raw_score"] for s in measured["steps"]], label=name)
        axes[1].plot(steps, [s["independent_check"] for s in measured["steps"]], label=name)
    axes[0].set(title="reward model raw score", xlabel="GRPO step")
    axes[1].set(title="independent check (equation true)", xlabel="GRPO step", ylim=(0, 1))
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="a run folder with a mode_fusion_sft checkpoint")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--learning-rate", type=float, default=3e-5)
    parser.add_argument("--window", type=int, default=8)
    parser.add_argument("--drop", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default="length_biased,true")
    args = parser.parse_args()
    from stage_data import prepared_data

    from posttrain.config.loading import load_config

    data = prepared_data(load_config(ROOT / "configs" / "default.yaml"), ("reward_model", "general_rl"))
    args.prepared_prompts = data.for_stage("general_rl")["general_prompts"].path
    pairs = read_jsonl(Path(data.for_stage("reward_model")["preferences"].path))
    arms = {}
    with tempfile.TemporaryDirectory() as work:
        for name in args.arms.split(","):
            arms[name] = arm(name, length_biased(pairs) if name == "length_biased" else pairs, Path(args.run), Path(work), args)
            print(name, json.dumps({k: arms[name][k] for k in ("reward_model", "goodhart_fired")}))
    result = {"run": args.run, "settings": {k: v for k, v in vars(args).items() if k != "run"}, "arms": arms}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "goodhart_alert.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(arms, RESULTS / "goodhart_alert.png")


if __name__ == "__main__":
    main()
