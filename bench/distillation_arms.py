"""Is on-policy distillation worth it here? Qwen3's Table 21 question on the embedded world: three
ways to train the same student from the same teacher, each with several seeds.

    (a) off_policy:  SFT on the teacher's verified responses (the distillation stage's default)
    (b) on_policy:   (a), then `--on-policy-steps` of TRL's DistillationTrainer (reverse KL on the
                     student's own samples, teacher scoring them: stages/distillation.on_policy_phase)
    (c) student_rl:  (a), then GRPO on the student (the reasoning RL stage, its prompts and rewards)
                     for the same wall time as (b)'s on-policy phase

Each checkpoint gets the config's full held-out evaluation. Reported per arm: math accuracy in both
modes, /no_think compliance, instruction following, wall time and tokens (teacher generated or
scored, student sampled or trained), as means over seeds with 95% t-intervals, and (b)-(a), (c)-(a)
as paired item-level differences pooled over seeds (95% CI).

    python bench/distillation_arms.py --teacher runs/<run>/general_rl/checkpoint --seeds 3 \
        --out /tmp/arms --record bench/results/distillation_arms
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

from posttrain.registry.checkpoint import directory_digest, load_checkpoint, save_checkpoint  # noqa: E402
from posttrain.config.loading import load_config  # noqa: E402
from posttrain.data.files import read_jsonl  # noqa: E402
from posttrain.evaluation.suites import evaluate  # noqa: E402
from posttrain.schema import CheckpointRef  # noqa: E402

ARMS = ("off_policy", "on_policy", "student_rl")
METRICS = ("math/accuracy", "no_think/accuracy", "no_think/mode_compliance", "instruction/accuracy")


def ref(path: Path) -> CheckpointRef:
    return CheckpointRef(path=str(path.absolute()), digest=directory_digest(path))


def completion_tokens(log: list[dict], per_step: int) -> float:
    """Completion tokens sampled over a TRL generation trainer's logged steps (mean length x count)."""
    return float(sum(row.get("completions/mean_length", 0.0) * per_step for row in log if "loss" in row))


class StopAfter:
    """A TrainerCallback that ends training once `seconds` of it have passed (arm c's equal wall time)."""

    def __init__(self, seconds: float):
        from transformers import TrainerCallback

        outer = self

        class _Callback(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                outer.started = time.time()

            def on_step_end(self, args, state, control, **kwargs):
                if time.time() - outer.started >= outer.seconds:
                    control.should_training_stop = True

        self.seconds, self.callback = seconds, _Callback()


def run_seed(cfg, data, teacher: CheckpointRef, student: CheckpointRef, seed: int, out: Path, steps: int) -> dict:
    import trl

    from stages import distillation, reasoning_rl

    common = dict(data_store=str(cfg.path(cfg.paths.data_store)), dvc_remote=str(cfg.path(cfg.paths.dvc_remote)))
    arms: dict[str, dict] = {}

    # (a) off-policy SFT on verified teacher responses
    config_a = cfg.stage("distillation").model_copy(update={"on_policy_steps": 0})
    inputs_a = stage_inputs(cfg, "distillation", data, work_dir=out / "off_policy", parent=teacher, seed=seed,
                            student=student, **common)
    result_a = distillation.run(config_a, inputs_a)
    sft_tokens = max((r.get("num_tokens", 0.0) for r in result_a.train_log), default=0.0)
    arms["off_policy"] = {"checkpoint": result_a.checkpoint, "wall_s": result_a.wall_s, "phase_wall_s": result_a.wall_s,
                          "teacher_tokens": result_a.train_metrics.get("teacher_tokens", 0.0),
                          "student_tokens": sft_tokens}

    # (b) (a) + on-policy distillation
    config_b = cfg.stage("distillation").model_copy(update={"on_policy_steps": steps})
    inputs_b = stage_inputs(cfg, "distillation", data, work_dir=out / "on_policy", parent=teacher, seed=seed,
                            student=result_a.checkpoint, **common)
    prompts = read_jsonl(Path(inputs_b.data["distillation_prompts"].path))
    model, tokenizer = load_checkpoint(result_a.checkpoint, settings=inputs_b.model)
    started = time.time()
    model, log_b = distillation.on_policy_phase(config_b, inputs_b, model, tokenizer, prompts)
    wall_b = time.time() - started
    sampled_b = completion_tokens(log_b, 16)   # per_device_train_batch_size of on_policy_phase
    arms["on_policy"] = {"checkpoint": save_checkpoint(model, tokenizer, out / "on_policy" / "checkpoint"),
                         "wall_s": result_a.wall_s + wall_b, "phase_wall_s": wall_b, "steps": len(log_b),
                         "teacher_tokens": arms["off_policy"]["teacher_tokens"] + sampled_b,  # the teacher scores each sample
                         "student_tokens": sft_tokens + sampled_b}
    del model

    # (c) (a) + GRPO on the student, for (b)'s wall time
    rl = cfg.stage("reasoning_rl")
    config_c = rl.model_copy(update={"trainer": rl.trainer.model_copy(update={"max_steps": 10_000, "save_steps": 10_000}),
                                     "probe_every": 0})
    stop = StopAfter(wall_b)
    original_train = trl.GRPOTrainer.train

    def train(self, *args, **kwargs):
        self.add_callback(stop.callback)
        return original_train(self, *args, **kwargs)

    trl.GRPOTrainer.train = train
    try:
        inputs_c = stage_inputs(cfg, "reasoning_rl", data, work_dir=out / "student_rl", parent=result_a.checkpoint,
                                seed=seed, **common)
        started = time.time()
        result_c = reasoning_rl.run(config_c, inputs_c)
        wall_c = time.time() - started
    finally:
        trl.GRPOTrainer.train = original_train
    per_step = config_c.trainer.prompts_per_step * config_c.trainer.num_generations
    sampled_c = completion_tokens(result_c.train_log, per_step)
    arms["student_rl"] = {"checkpoint": result_c.checkpoint, "wall_s": result_a.wall_s + wall_c, "phase_wall_s": wall_c,
                          "steps": sum(1 for r in result_c.train_log if "loss" in r),
                          "teacher_tokens": arms["off_policy"]["teacher_tokens"],
                          "student_tokens": sft_tokens + sampled_c}

    for arm in ARMS:
        evaluation = evaluate(arms[arm]["checkpoint"], cfg, suites=data.suites, desc=f"seed {seed} {arm}")
        arms[arm]["metrics"] = {m: evaluation.metrics[m] for m in METRICS}
        arms[arm]["per_item"] = {m: evaluation.per_item[m] for m in METRICS if m in evaluation.per_item}
        arms[arm]["checkpoint"] = arms[arm]["checkpoint"].path
    return arms


def summarise(per_seed: dict[int, dict], confidence: float) -> dict:
    summary: dict = {"arms": {}, "paired_vs_off_policy": {}}
    for arm in ARMS:
        row = {}
        for key in (*METRICS, "wall_s", "phase_wall_s", "teacher_tokens", "student_tokens"):
            values = [per_seed[s][arm]["metrics"][key] if key in METRICS else per_seed[s][arm][key] for s in per_seed]
            row[key] = mean_ci(values)
        summary["arms"][arm] = row
    for arm in ARMS[1:]:
        summary["paired_vs_off_policy"][arm] = paired_against(per_seed, arm, "off_policy", METRICS, confidence)
    return summary


def markdown(summary: dict, per_seed: dict, meta: dict) -> str:
    fmt = lambda t, d=3: f"{t[0]:.{d}f} [{t[1]:.{d}f}, {t[2]:.{d}f}]"  # noqa: E731
    lines = ["# Off-policy vs on-policy distillation vs RL on the student", "",
             f"Teacher `{meta['teacher']}`, student `{meta['student']}`, seeds {meta['seeds']}, on-policy steps "
             f"{meta['on_policy_steps']}, recorded {meta['recorded']}. Means over seeds with 95% t-intervals.", "",
             "| arm | math (think) | math (/no_think) | /no_think compliance | instruction | wall s (total) | wall s (phase) "
             "| teacher tokens | student tokens |", "|---|---|---|---|---|---|---|---|---|"]
    for arm in ARMS:
        r = summary["arms"][arm]
        lines.append(f"| {arm} | " + " | ".join(fmt(r[m]) for m in METRICS) + f" | {fmt(r['wall_s'], 0)} | "
                     f"{fmt(r['phase_wall_s'], 0)} | {r['teacher_tokens'][0]:.0f} | {r['student_tokens'][0]:.0f} |")
    lines += ["", "Paired item-level differences against off_policy, pooled over seeds (95% CI):", "",
              "| arm | " + " | ".join(METRICS) + " |", "|---|" + "---|" * len(METRICS)]
    for arm, diffs in summary["paired_vs_off_policy"].items():
        lines.append(f"| {arm} | " + " | ".join(f"{diffs[m][0]:+.3f} [{diffs[m][1]:+.3f}, {diffs[m][2]:+.3f}]"
                                               if m in diffs else "–" for m in METRICS) + " |")
    lines += ["", "Per seed:", "", "| seed | arm | " + " | ".join(METRICS) + " | phase wall s | steps |",
              "|---|---|" + "---|" * (len(METRICS) + 2)]
    for seed, arms in per_seed.items():
        for arm in ARMS:
            a = arms[arm]
            lines.append(f"| {seed} | {arm} | " + " | ".join(f"{a['metrics'][m]:.3f}" for m in METRICS)
                         + f" | {a['phase_wall_s']:.0f} | {a.get('steps', '–')} |")
    return "\n".join(lines) + "\n"


def plot(summary: dict, path: Path) -> None:
    arms_plot({arm: summary["arms"][arm] for arm in ARMS}, METRICS, path, title="Student after each arm")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--teacher", required=True, type=Path, help="the teacher checkpoint (general_rl's)")
    parser.add_argument("--student", type=Path, help="the student base (default: the config's)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--on-policy-steps", type=int, default=20)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--record", type=Path, help="write <record>.json/.md/.png")
    args = parser.parse_args()
    cfg = load_config(args.config)
    data = prepared_data(cfg, ("distillation", "reasoning_rl"))
    if args.student is None:
        from flows.chain import base_checkpoint

        student = base_checkpoint(cfg, "student")
    else:
        student = ref(args.student)
    teacher = ref(args.teacher)
    per_seed = {}
    for i in range(args.seeds):
        seed = cfg.seed + i
        per_seed[seed] = run_seed(cfg, data, teacher, student, seed, (args.out / f"seed{seed}").absolute(),
                                  args.on_policy_steps)
        print(json.dumps({seed: {a: per_seed[seed][a]["metrics"] for a in ARMS}}, indent=1), flush=True)
    summary = summarise(per_seed, cfg.evaluation.confidence)
    meta = {"teacher": str(args.teacher), "student": student.path, "seeds": list(per_seed),
            "on_policy_steps": args.on_policy_steps, "recorded": time.strftime("%Y-%m-%d")}
    text = markdown(summary, per_seed, meta)
    print(text)
    if args.record:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        slim = {s: {a: {k: v for k, v in arms[a].items() if k != "per_item"} for a in ARMS} for s, arms in per_seed.items()}
        args.record.with_suffix(".json").write_text(json.dumps({"meta": meta, "summary": summary, "per_seed": slim},
                                                               indent=2))
        args.record.with_suffix(".md").write_text(text)
        plot(summary, args.record.with_suffix(".png"))


if __name__ == "__main__":
    main()
