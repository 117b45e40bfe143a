"""Stage 2 — reasoning RL: GRPO with verifiable rewards (correctness, format, language
consistency, length), on TRL's GRPOTrainer with our problem sampler (curriculum / prioritized by
running success rate / dropping zero-signal groups) and its state kept across a resume.

Reads the `reasoning_prompts` data role; each row's task kind picks its verifier."""
from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import torch

from posttrain.agents.training import StageTools
from posttrain.registry.checkpoint import load_checkpoint
from posttrain.data.code_tests import forgeable_code_rows
from posttrain.config.pipeline import ReasoningRLConfig
from posttrain.data.files import read_jsonl
from posttrain.registry.live_metrics import follow
from posttrain.rewards import VERIFIER_VERSIONS, check_task_rewards, unguarded_code_rows
from posttrain.rl.trainer import HeldOutProbe, StageGRPOTrainer, off_policy_settings, policy_record
from posttrain.rl.sampling import ProblemStats
from posttrain.rl.alerts import RLAlerts
from posttrain.rl.rewards import by_kind, stage_rewards
from posttrain.schema import StageInputs, StageResult
from posttrain.training.trainers import reward_settings, grpo_args, grpo_dataset, numeric_log, peft_config, require_rows, resume_point, save_trained, sharding, summary

STAGE_VERSION = "reasoning_rl/5"   # tool rows: multi-turn episodes in their environments


def run(config: ReasoningRLConfig, inputs: StageInputs) -> StageResult:
    started = time.time()
    torch.set_num_threads(config.trainer.threads)
    work = Path(inputs.work_dir)
    model, tokenizer = load_checkpoint(inputs.parent, settings=inputs.model)
    chat = inputs.model.chat

    source = inputs.data["reasoning_prompts"]
    problems = require_rows(read_jsonl(Path(source.path)), "reasoning_rl", "reasoning_prompts")

    settings = reward_settings(config, model, tokenizer)
    check_task_rewards(config.rewards.model_dump(), Counter(p["kind"] for p in problems),
                       "reasoning_rl (data role reasoning_prompts)")
    # Problems are grouped for the prioritized sampler's prior by the data's own `group` (else kind).
    stats = ProblemStats([str(p.get("group", p["kind"])) for p in problems], prior=config.sampling.prior_success)
    reward_funcs, weights = stage_rewards(config.rewards.model_dump(), settings, chat=chat, tokenizer=tokenizer,
                                          model=model, stats=stats)
    tools = StageTools(problems, tokenizer, work, "reasoning_rl's policy")
    trainer = StageGRPOTrainer(model=model, reward_funcs=tools.rewards(reward_funcs),
                               train_dataset=grpo_dataset(tokenizer, chat, problems, tools=tools.factories is not None),
                               environment_factory=tools.factories,
                               args=grpo_args(config.trainer, work / "trainer", inputs.seed, weights),
                               processing_class=tokenizer, sampling=config.sampling,
                               difficulty=[int(p.get("difficulty", 1)) for p in problems], problem_stats=stats,
                               monitor_kl=config.trainer.monitor_kl, peft_config=peft_config(config.trainer),
                               **off_policy_settings(config.trainer))
    alerts = RLAlerts(config.alerts)
    trainer.add_callback(alerts)
    follow(trainer, inputs)
    if config.probe_every and inputs.probe is not None:
        probe = read_jsonl(Path(inputs.probe.path))[:config.probe_items]
        trainer.add_callback(HeldOutProbe(tokenizer, chat, probe, every=config.probe_every,
                                          max_new_tokens=config.trainer.max_completion_length))
    checkpoint_dir = resume_point(work / "trainer")
    trainer.restore_sampler(checkpoint_dir)
    tools.start(checkpoint_dir)
    trainer.train(resume_from_checkpoint=checkpoint_dir)

    log = numeric_log(trainer)
    checkpoint, adapter = save_trained(trainer, tokenizer, work, inputs.parent)
    return StageResult(
        name="reasoning_rl", checkpoint=checkpoint, parent=inputs.parent, adapter=adapter,
        datasets_consumed=[source], datasets_produced=tools.produced(inputs, "reasoning_rl"), train_log=log,
        verifier_versions={**VERIFIER_VERSIONS, **tools.versions},
        policies=policy_record(config.trainer, inputs.parent, checkpoint_dir, trainer), alerts=[a["message"] for a in alerts.fired] + [n for n in [unguarded_code_rows(problems), forgeable_code_rows(problems)] if n],
        train_metrics={**sharding(trainer), "prompts": len(problems), **summary(
            log, ("reward", "reward_std", "frac_reward_zero_std", "entropy", "completions/mean_length",
                  "completions/clipped_ratio", "kl", "groups/all_correct", "groups/all_wrong", "groups/mixed",
                  "length/correct", "length/wrong", *by_kind(log)))},
        wall_s=time.time() - started,
    )
