"""Stage 5 — general RL (Qwen3 sec. 4.4): GRPO on the `general_prompts` data role, whatever their
task kinds (instruction constraints, math, direct questions, code, open-ended): each row's kind picks
the rewards that apply to it (the open-ended kind: the reward model of the reward_model stage), and
math in both modes keeps the mode switch learnt in fusion."""
from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import torch

from posttrain.agents.training import StageTools
from posttrain.registry.checkpoint import checkpoint_location, load_checkpoint
from posttrain.data.code_tests import forgeable_code_rows
from posttrain.config.pipeline import GeneralRLConfig
from posttrain.data.files import read_jsonl
from posttrain.registry.live_metrics import follow
from posttrain.rewards.reward_model import RewardModelScorer
from posttrain.rewards.judge import build_judge
from posttrain.rewards import VERIFIER_VERSIONS, check_task_rewards, unguarded_code_rows
from posttrain.rl.trainer import StageGRPOTrainer, off_policy_settings, policy_record
from posttrain.rl.alerts import RLAlerts
from posttrain.rl.rewards import by_kind, stage_rewards
from posttrain.schema import StageInputs, StageResult
from posttrain.training.trainers import reward_settings, grpo_args, grpo_dataset, numeric_log, peft_config, require_rows, resume_point, save_trained, sharding, summary

STAGE_VERSION = "general_rl/6"   # tool rows: multi-turn episodes in their environments


def run(config: GeneralRLConfig, inputs: StageInputs) -> StageResult:
    started = time.time()
    torch.set_num_threads(config.trainer.threads)
    work = Path(inputs.work_dir)
    model, tokenizer = load_checkpoint(inputs.parent, settings=inputs.model)

    source = inputs.data["general_prompts"]
    rows = require_rows(read_jsonl(Path(source.path)), "general_rl", "general_prompts")
    random.Random(inputs.seed).shuffle(rows)

    check_task_rewards(config.rewards.model_dump(), Counter(r["kind"] for r in rows), "general_rl (data role general_prompts)")
    scorer = None
    if config.rewards.reward_model:
        if inputs.reward_model is None:
            raise ValueError("general_rl: rewards.reward_model is weighted but the chain gave no reward model "
                             "(run the reward_model stage: data.preferences or stages.reward_model.bring)")
        scorer = RewardModelScorer(checkpoint_location(inputs.reward_model),
                                   batch_size=config.reward_settings.reward_model_batch_size,
                                   max_length=config.reward_settings.reward_model_max_length)
    judge = build_judge(config.judge, inputs.model) if config.rewards.judge else None
    reward_funcs, weights = stage_rewards(config.rewards.model_dump(), reward_settings(config, model, tokenizer, scorer, judge),
                                          chat=inputs.model.chat, tokenizer=tokenizer, model=model)
    tools = StageTools(rows, tokenizer, work, "general_rl's policy")
    trainer = StageGRPOTrainer(model=model, reward_funcs=tools.rewards(reward_funcs),
                               train_dataset=grpo_dataset(tokenizer, inputs.model.chat, rows, tools=tools.factories is not None),
                               args=grpo_args(config.trainer, work / "trainer", inputs.seed, weights),
                               processing_class=tokenizer, monitor_kl=config.trainer.monitor_kl,
                               peft_config=peft_config(config.trainer), environment_factory=tools.factories,
                               **off_policy_settings(config.trainer))
    alerts = RLAlerts(config.alerts)
    trainer.add_callback(alerts)
    follow(trainer, inputs)
    checkpoint_dir = resume_point(work / "trainer")
    tools.start(checkpoint_dir)
    trainer.train(resume_from_checkpoint=checkpoint_dir)

    log = numeric_log(trainer)
    checkpoint, adapter = save_trained(trainer, tokenizer, work, inputs.parent)
    kinds = Counter(r["kind"] for r in rows)
    return StageResult(
        name="general_rl", checkpoint=checkpoint, parent=inputs.parent, adapter=adapter,
        datasets_consumed=[source], datasets_produced=tools.produced(inputs, "general_rl"), train_log=log,
        verifier_versions={**VERIFIER_VERSIONS, **tools.versions}, policies=policy_record(config.trainer, inputs.parent, checkpoint_dir, trainer),
        alerts=[a["message"] for a in alerts.fired] + [n for n in [unguarded_code_rows(rows), forgeable_code_rows(rows)] if n],
        train_metrics={**sharding(trainer), **{f"{kind}_prompts": float(n) for kind, n in kinds.items()},
                       "no_think_prompts": float(sum(r.get("thinking") is False for r in rows)), **summary(
            log, ("reward", "reward_std", "frac_reward_zero_std", "entropy", "kl", "completions/mean_length",
                  *by_kind(log)))},
        wall_s=time.time() - started,
    )
