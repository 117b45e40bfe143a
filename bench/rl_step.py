"""Seconds per GRPO step: our reasoning-RL stage vs a bare TRL GRPOTrainer script, same model,
prompts, group size, batch and lengths, in one process (so both see the same machine load).

    python bench/rl_step.py --parent runs/<run>/cold_start_sft/checkpoint --steps 8

Targets (issue 4): ours <= 1.10x bare TRL per step; reward computation <= 10% of our step time.
Step times depend on how long the sampled completions are, so the comparison is also given per
1,000 completion tokens. Ours includes what the stage adds per step, e.g. at beta = 0 the KL
monitor (two forward passes over one completion per group). Results go to bench/results/rl_step.json.
"""
from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from posttrain.env import configure_offline

configure_offline()
sys.path.insert(0, str(Path(__file__).resolve().parent))   # the bench's own modules, however this is loaded

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from stage_data import prepared_data, stage_inputs  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from posttrain.chat import with_switch  # noqa: E402
from posttrain.registry.checkpoint import directory_digest, load_checkpoint  # noqa: E402
from posttrain.config.loading import load_config  # noqa: E402
from posttrain.data.files import read_jsonl  # noqa: E402
from posttrain.rl.trainer import StageGRPOTrainer  # noqa: E402
from posttrain.schema import CheckpointRef  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def per_step(log: list[dict]) -> dict:
    rows = [r for r in log if "step_time" in r][1:]  # the first step pays one-off warm-up
    seconds = [r["step_time"] for r in rows]
    tokens = [r["completions/mean_length"] * r.get("batch_completions", 1) for r in rows]
    return {"steps_timed": len(rows), "median_s_per_step": statistics.median(seconds),
            "mean_s_per_step": statistics.fmean(seconds),
            "mean_completion_tokens": statistics.fmean(r["completions/mean_length"] for r in rows),
            "s_per_1k_completion_tokens": 1000 * sum(seconds) / max(1.0, sum(tokens))}


def bare_trl(model_dir: Path, problems: list[dict], cfg, steps: int, out: Path) -> list[dict]:
    """What a user would write by hand: GRPOTrainer on conversational prompts (the mode switch
    written in), a regex reward, TRL's own sampler."""
    stage_cfg, settings = cfg.stage("reasoning_rl"), cfg.base.settings()
    torch.set_num_threads(stage_cfg.trainer.threads)
    model, tokenizer = load_checkpoint(model_dir, settings=settings)
    t = stage_cfg.trainer
    dataset = Dataset.from_list([{"prompt": with_switch(p["prompt"], settings.chat, p.get("thinking")),
                                  "answer": p["answer"]} for p in problems])

    def boxed_match(completions, answer, **_):
        found = [re.findall(r"\\boxed\{([^}]*)\}", c[0]["content"] if isinstance(c, list) else c) for c in completions]
        return [float(bool(f) and f[-1].strip() == a) for f, a in zip(found, answer)]

    args = GRPOConfig(output_dir=str(out), learning_rate=t.learning_rate, max_steps=steps, logging_steps=1,
                      per_device_train_batch_size=t.prompts_per_step * t.num_generations,
                      num_generations=t.num_generations, max_completion_length=t.max_completion_length,
                      temperature=t.temperature, loss_type=t.loss_type, beta=t.beta, top_k=0,
                      use_cpu=not torch.cuda.is_available(), bf16=False, gradient_checkpointing=False,
                      report_to="none", save_strategy="no", seed=0, disable_tqdm=True)
    trainer = GRPOTrainer(model=model, reward_funcs=boxed_match, train_dataset=dataset, args=args,
                          processing_class=tokenizer)
    trainer.train()
    return trainer.state.log_history


def ours(parent: CheckpointRef, cfg, data, out: Path) -> tuple[list[dict], float]:
    from stages import reasoning_rl

    reward_seconds = [0.0]
    original = StageGRPOTrainer._calculate_rewards

    def timed(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            reward_seconds[0] += time.perf_counter() - started

    StageGRPOTrainer._calculate_rewards = timed
    try:
        stage_cfg = cfg.stage("reasoning_rl")
        result = reasoning_rl.run(stage_cfg, stage_inputs(cfg, "reasoning_rl", data, work_dir=out, parent=parent, seed=0))
    finally:
        StageGRPOTrainer._calculate_rewards = original
    return result.train_log, reward_seconds[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--parent", required=True, type=Path, help="checkpoint both trainers start from")
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    cfg = load_config(args.config, overrides={"stages.reasoning_rl.trainer.max_steps": args.steps,
                                              "stages.reasoning_rl.probe_every": 0})
    stage_cfg = cfg.stage("reasoning_rl")
    data = prepared_data(cfg, ("reasoning_rl",))
    problems = read_jsonl(Path(data.roles["reasoning_prompts"].path))
    parent = CheckpointRef(path=str(args.parent.absolute()), digest=directory_digest(args.parent))
    batch = stage_cfg.trainer.prompts_per_step * stage_cfg.trainer.num_generations

    with tempfile.TemporaryDirectory() as tmp:
        bare_log = bare_trl(args.parent, problems, cfg, args.steps, Path(tmp) / "bare")
        our_log, reward_s = ours(parent, cfg, data, Path(tmp) / "ours")
    for log in (bare_log, our_log):
        for row in log:
            row["batch_completions"] = batch
    bare, mine = per_step(bare_log), per_step(our_log)
    total_step_s = sum(r["step_time"] for r in our_log if "step_time" in r)
    result = {
        "recorded": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "setup": {"steps": args.steps, "prompts_per_step": stage_cfg.trainer.prompts_per_step,
                  "num_generations": stage_cfg.trainer.num_generations,
                  "max_completion_length": stage_cfg.trainer.max_completion_length, "parent": str(args.parent)},
        "bare_trl": bare, "ours": mine,
        "ratio_s_per_step": mine["median_s_per_step"] / bare["median_s_per_step"],
        "ratio_s_per_1k_tokens": mine["s_per_1k_completion_tokens"] / bare["s_per_1k_completion_tokens"],
        "reward_share_of_step": reward_s / total_step_s if total_step_s else None,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "rl_step.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
