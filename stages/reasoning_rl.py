"""Stage 2 — reasoning RL: GRPO on math with verifiable rewards (correctness, format, language
consistency, length), on TRL's GRPOTrainer with our problem sampler (curriculum / prioritized by
running success rate / dropping zero-signal groups) and its state kept across a resume."""
from __future__ import annotations

import time
from pathlib import Path

import torch
from datasets import Dataset

from posttrain.chat import user_turn
from posttrain.checkpoint import load_checkpoint, save_checkpoint
from posttrain.config import ReasoningRLConfig
from posttrain.rewards import VERIFIER_VERSIONS, build_rewards
from posttrain.rl import HeldOutProbe, ProblemStats, RLAlerts, StageGRPOTrainer, policy_record, tracked_correctness
from posttrain.schema import StageInputs, StageResult
from posttrain.trainers import grpo_args, numeric_log, resume_point, summary
from posttrain.world.build import WorldPaths, dataset_ref, pool_share, read_jsonl

STAGE_VERSION = "reasoning_rl/2"


def training_problems(config: ReasoningRLConfig, world_dir: Path) -> list[dict]:
    """The stage's prompt pool: its share of the math training set, at the configured levels."""
    source = WorldPaths(world_dir).file("math_train")
    pool = pool_share(read_jsonl(source, ("question", "answer", "language", "level", "op")), "reasoning_rl")
    return [p for p in pool if p["level"] in config.levels][:config.prompts]


def run(config: ReasoningRLConfig, inputs: StageInputs) -> StageResult:
    started = time.time()
    torch.set_num_threads(config.trainer.threads)
    work = Path(inputs.work_dir)
    model, tokenizer = load_checkpoint(inputs.parent)

    source = WorldPaths(Path(inputs.world_dir)).file("math_train")
    problems = training_problems(config, Path(inputs.world_dir))
    dataset = Dataset.from_list([{"prompt": [user_turn(p["question"], True)], "answer": p["answer"],
                                  "language": p["language"], "kind": "math", "thinking": True,
                                  "problem_index": i} for i, p in enumerate(problems)])

    reward_funcs, weights = build_rewards(
        config.rewards.model_dump(), num_generations=config.trainer.num_generations,
        length_warmup_steps=config.reward_settings.length_warmup_steps,
        max_completion_length=config.trainer.max_completion_length, overlong_cache=config.reward_settings.overlong_cache)
    stats = ProblemStats([f"L{p['level']}{p['op']}" for p in problems], prior=config.sampling.prior_success)
    reward_funcs = [tracked_correctness(stats, config.trainer.num_generations) if f.__name__ == "correctness" else f
                    for f in reward_funcs]
    trainer = StageGRPOTrainer(model=model, reward_funcs=reward_funcs, train_dataset=dataset,
                               args=grpo_args(config.trainer, work / "trainer", inputs.seed, weights, stateful_sampler=True),
                               processing_class=tokenizer, sampling=config.sampling,
                               difficulty=[p["level"] for p in problems], problem_stats=stats,
                               monitor_kl=config.trainer.monitor_kl)
    alerts = RLAlerts(config.alerts)
    trainer.add_callback(alerts)
    if config.probe_every:
        probe = read_jsonl(WorldPaths(Path(inputs.world_dir)).file("eval_math"), ("question", "answer"))
        trainer.add_callback(HeldOutProbe(tokenizer, probe[:config.probe_items], every=config.probe_every,
                                          max_new_tokens=config.trainer.max_completion_length))
    checkpoint_dir = resume_point(work / "trainer")
    trainer.restore_sampler(checkpoint_dir)
    trainer.train(resume_from_checkpoint=checkpoint_dir)

    log = numeric_log(trainer)
    checkpoint = save_checkpoint(trainer.model, tokenizer, work / "checkpoint")
    return StageResult(
        name="reasoning_rl", checkpoint=checkpoint, parent=inputs.parent,
        datasets_consumed=[dataset_ref(source)], train_log=log, verifier_versions=VERIFIER_VERSIONS,
        policies=policy_record(config.trainer, inputs.parent, checkpoint_dir), alerts=[a["message"] for a in alerts.fired],
        train_metrics={"prompts": len(problems), **summary(
            log, ("reward", "reward_std", "frac_reward_zero_std", "entropy", "completions/mean_length",
                  "completions/clipped_ratio", "kl", "groups/all_correct", "groups/all_wrong", "groups/mixed",
                  "length/correct", "length/wrong"))},
        wall_s=time.time() - started,
    )
