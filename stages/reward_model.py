"""Reward model (DeepSeek-R1 sec. 2.3.4; Qwen3 sec. 4.4): a scalar head trained on the `preferences`
data role with TRL's RewardTrainer, or a brought reward model measured as it is. The policy passes
through unchanged; general RL scores its open-ended rows with this model (posttrain.rewards.reward_model).

The gate reads the held-out pairs (split by prompt): pairwise accuracy, mean margin, the score's
correlation with length and the accuracy where the chosen reply is the shorter one."""
from __future__ import annotations

import time
from pathlib import Path

import torch

from posttrain.registry.checkpoint import checkpoint_location, seal
from posttrain.config.pipeline import RewardModelConfig
from posttrain.data.files import read_jsonl
from posttrain.registry.live_metrics import follow
from posttrain.rewards.model_based import REWARD_MODEL_VERSION
from posttrain.rewards.reward_model import RewardModelScorer, pair_metrics, split_pairs
from posttrain.schema import CheckpointRef, StageInputs, StageResult
from posttrain.training.trainers import numeric_log, peft_config, require_rows, resume_point, reward_args, summary

STAGE_VERSION = "reward_model/1"


def _train(config: RewardModelConfig, inputs: StageInputs, rows: list[dict], out: Path):
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trl import RewardTrainer

    trainer_cfg = config.trainer
    location = checkpoint_location(inputs.reward_model)
    tokenizer = AutoTokenizer.from_pretrained(location)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(inputs.seed)   # the scalar head is initialised at random
    model = AutoModelForSequenceClassification.from_pretrained(location, num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id
    columns = ["prompt", "chosen", "rejected"]
    records = [{c: r[c] for c in columns} for r in rows]
    if trainer_cfg.use_margin:
        records = [{**rec, "margin": float(r["score_chosen"] - r["score_rejected"])}
                   for rec, r in zip(records, rows)]
    args = reward_args(trainer_cfg, out / "trainer", inputs.seed)
    trainer = RewardTrainer(model=model, args=args, train_dataset=Dataset.from_list(records),
                            processing_class=tokenizer, peft_config=peft_config(trainer_cfg))
    follow(trainer, inputs)
    trainer.train(resume_from_checkpoint=resume_point(out / "trainer"))
    model = trainer.model.merge_and_unload() if hasattr(trainer.model, "merge_and_unload") else trainer.model
    target = out / "reward_model"
    model.save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)
    return CheckpointRef(path=str(target.absolute()), digest=seal(target)), numeric_log(trainer)


def run(config: RewardModelConfig, inputs: StageInputs) -> StageResult:
    started = time.time()
    torch.set_num_threads(config.trainer.threads)
    work = Path(inputs.work_dir)
    if inputs.reward_model is None:
        raise ValueError("reward_model: the stage needs the model it trains from or the one brought "
                         "(StageInputs.reward_model)")
    source = inputs.data.get("preferences")
    rows = require_rows(read_jsonl(Path(source.path)), "reward_model", "preferences") if source else []
    train, held = split_pairs(rows, config.held_out, inputs.seed)
    log: list[dict] = []
    if config.bring:
        reward_model = inputs.reward_model
    else:
        require_rows(train, "reward_model", f"training pairs after holding out {config.held_out:.0%} of the prompts")
        reward_model, log = _train(config, inputs, train, work)
    scorer = RewardModelScorer(checkpoint_location(reward_model), batch_size=config.batch_size,
                               max_length=config.trainer.max_length)
    measured = pair_metrics(scorer, held) if held else {}
    return StageResult(
        name="reward_model", checkpoint=inputs.parent, parent=inputs.parent, reward_model=reward_model,
        datasets_consumed=[source] if source else [], train_log=log,
        verifier_versions={"reward/reward_model": REWARD_MODEL_VERSION},
        train_metrics={"training_pairs": float(len(train)), **measured,
                       **summary(log, ("loss", "accuracy", "margin"))},
        wall_s=time.time() - started,
    )
