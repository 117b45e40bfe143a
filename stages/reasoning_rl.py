"""Stage 2 — reasoning RL: GRPO on math with verifiable rewards (correctness, format, language
consistency), on TRL's GRPOTrainer."""
from __future__ import annotations

import time
from pathlib import Path

import torch
from datasets import Dataset
from trl import GRPOTrainer

from posttrain.chat import user_turn
from posttrain.checkpoint import load_checkpoint, save_checkpoint
from posttrain.config import ReasoningRLConfig
from posttrain.rewards import VERIFIER_VERSIONS, build_rewards
from posttrain.schema import StageInputs, StageResult
from posttrain.trainers import grpo_args, numeric_log, resume_point, summary
from posttrain.world.build import WorldPaths, dataset_ref, pool_share, read_jsonl

STAGE_VERSION = "reasoning_rl/1"


def run(config: ReasoningRLConfig, inputs: StageInputs) -> StageResult:
    started = time.time()
    torch.set_num_threads(config.trainer.threads)
    work = Path(inputs.work_dir)
    model, tokenizer = load_checkpoint(inputs.parent)

    source = WorldPaths(Path(inputs.world_dir)).file("math_train")
    pool = pool_share(read_jsonl(source, ("question", "answer", "language", "level")), "reasoning_rl")
    problems = [p for p in pool if p["level"] in config.levels][:config.prompts]
    dataset = Dataset.from_list([{"prompt": [user_turn(p["question"], True)], "answer": p["answer"],
                                  "language": p["language"], "kind": "math", "thinking": True}
                                 for p in problems])

    reward_funcs, weights = build_rewards(
        config.rewards.model_dump(), num_generations=config.trainer.num_generations,
        length_warmup_steps=config.reward_settings.length_warmup_steps,
        max_completion_length=config.trainer.max_completion_length, overlong_cache=config.reward_settings.overlong_cache)
    trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, train_dataset=dataset,
                          args=grpo_args(config.trainer, work / "trainer", inputs.seed, weights),
                          processing_class=tokenizer)
    trainer.train(resume_from_checkpoint=resume_point(work / "trainer"))

    log = numeric_log(trainer)
    checkpoint = save_checkpoint(trainer.model, tokenizer, work / "checkpoint")
    return StageResult(
        name="reasoning_rl", checkpoint=checkpoint, parent=inputs.parent,
        datasets_consumed=[dataset_ref(source)], train_log=log, verifier_versions=VERIFIER_VERSIONS,
        train_metrics={"prompts": len(problems), **summary(
            log, ("reward", "reward_std", "frac_reward_zero_std", "entropy", "completions/mean_length",
                  "completions/clipped_ratio", "kl"))},
        wall_s=time.time() - started,
    )
