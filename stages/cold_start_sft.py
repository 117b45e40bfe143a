"""Stage 1 — cold-start SFT (DeepSeek-R1 sec. 2.3.1): a few hundred long-CoT examples in the target
format (think block, then the answer) so RL starts from readable, well-formed reasoning.

Reads the `cold_start` data role; the loss falls on the assistant replies only, whatever the chat
template (posttrain.chat.sft_example)."""
from __future__ import annotations

import time
from pathlib import Path

import torch
from trl import SFTTrainer

from posttrain.registry.checkpoint import load_checkpoint
from posttrain.config.pipeline import ColdStartSFTConfig
from posttrain.data.files import read_jsonl
from posttrain.registry.live_metrics import follow
from posttrain.schema import StageInputs, StageResult
from posttrain.training.trainers import numeric_log, peft_config, require_rows, resume_point, save_trained, sft_args, sft_dataset, sharding, summary

STAGE_VERSION = "cold_start_sft/2"


def run(config: ColdStartSFTConfig, inputs: StageInputs) -> StageResult:
    started = time.time()
    torch.set_num_threads(config.trainer.threads)
    work = Path(inputs.work_dir)
    model, tokenizer = load_checkpoint(inputs.parent, settings=inputs.model)

    source = inputs.data["cold_start"]
    rows = require_rows(read_jsonl(Path(source.path)), "cold_start_sft", "cold_start")
    dataset, notes = sft_dataset(tokenizer, inputs.model.chat, rows, config.trainer.max_length,
                                 "stages.cold_start_sft.trainer.max_length")
    trainer = SFTTrainer(model=model, args=sft_args(config.trainer, work / "trainer", inputs.seed),
                         train_dataset=dataset, processing_class=tokenizer, peft_config=peft_config(config.trainer))
    follow(trainer, inputs)
    trainer.train(resume_from_checkpoint=resume_point(work / "trainer"))

    log = numeric_log(trainer)
    checkpoint, adapter = save_trained(trainer, tokenizer, work, inputs.parent)
    return StageResult(
        name="cold_start_sft", checkpoint=checkpoint, parent=inputs.parent, adapter=adapter,
        datasets_consumed=[source], train_log=log,
        train_metrics={"examples": len(rows), **summary(log, ("loss", "mean_token_accuracy")),
                       **sharding(trainer)},
        wall_s=time.time() - started, alerts=notes,
    )
