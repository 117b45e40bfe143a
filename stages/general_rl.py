"""Stage 5 — general RL (Qwen3 sec. 4.4): GRPO on instruction-following tasks with their constraint
verifiers, plus math so reasoning is not lost."""
from __future__ import annotations

import random
import time
from pathlib import Path

import torch
from datasets import Dataset

from posttrain.chat import user_turn
from posttrain.checkpoint import load_checkpoint, save_checkpoint
from posttrain.config import GeneralRLConfig
from posttrain.rewards import VERIFIER_VERSIONS, build_rewards
from posttrain.rl import KLMonitoredGRPOTrainer, RLAlerts, policy_record
from posttrain.schema import StageInputs, StageResult
from posttrain.trainers import grpo_args, numeric_log, resume_point, summary
from posttrain.world.build import WorldPaths, dataset_ref, pool_share, read_jsonl
from posttrain.world.tasks import instruction_mode

STAGE_VERSION = "general_rl/2"


def run(config: GeneralRLConfig, inputs: StageInputs) -> StageResult:
    started = time.time()
    torch.set_num_threads(config.trainer.threads)
    work = Path(inputs.work_dir)
    world = WorldPaths(Path(inputs.world_dir))
    model, tokenizer = load_checkpoint(inputs.parent)

    instr_source, math_source = world.file("instruction_train"), world.file("math_train")
    tasks = pool_share(read_jsonl(instr_source, ("question", "constraints", "thinking", "answer", "language")),
                       "general_rl")[:config.instruction_prompts]
    problems = pool_share(read_jsonl(math_source, ("question", "answer", "language")), "general_rl")[:config.math_prompts]
    rows = [{"prompt": [user_turn(t["question"], instruction_mode(t))], "kind": "instruction",
             "constraints": t["constraints"], "answer": t["answer"], "language": t["language"],
             "thinking": bool(t["thinking"])} for t in tasks]
    # Math in both modes: RL on thinking-only math erodes the /no_think switch learnt in mode fusion.
    no_think = set(range(round(len(problems) * config.no_think_share)))
    rows += [{"prompt": [user_turn(p["question"], i not in no_think)], "kind": "math", "constraints": "",
              "answer": p["answer"], "language": p["language"], "thinking": i not in no_think}
             for i, p in enumerate(problems)]
    random.Random(inputs.seed).shuffle(rows)

    reward_funcs, weights = build_rewards(
        config.rewards.model_dump(), num_generations=config.trainer.num_generations,
        length_warmup_steps=config.reward_settings.length_warmup_steps,
        max_completion_length=config.trainer.max_completion_length, overlong_cache=config.reward_settings.overlong_cache)
    trainer = KLMonitoredGRPOTrainer(model=model, reward_funcs=reward_funcs, train_dataset=Dataset.from_list(rows),
                                     args=grpo_args(config.trainer, work / "trainer", inputs.seed, weights),
                                     processing_class=tokenizer, monitor_kl=config.trainer.monitor_kl)
    alerts = RLAlerts(config.alerts)
    trainer.add_callback(alerts)
    checkpoint_dir = resume_point(work / "trainer")
    trainer.train(resume_from_checkpoint=checkpoint_dir)

    log = numeric_log(trainer)
    checkpoint = save_checkpoint(trainer.model, tokenizer, work / "checkpoint")
    return StageResult(
        name="general_rl", checkpoint=checkpoint, parent=inputs.parent,
        datasets_consumed=[dataset_ref(instr_source), dataset_ref(math_source)], train_log=log,
        verifier_versions=VERIFIER_VERSIONS, policies=policy_record(config.trainer, inputs.parent, checkpoint_dir),
        alerts=[a["message"] for a in alerts.fired],
        train_metrics={"instruction_prompts": len(tasks), "math_prompts": len(problems),
                       "no_think_math_prompts": len(no_think), **summary(
            log, ("reward", "reward_std", "frac_reward_zero_std", "entropy", "kl", "completions/mean_length"))},
        wall_s=time.time() - started,
    )
