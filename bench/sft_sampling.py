"""Seconds per SFT step by transformers' sampling strategy, on a run's mode-fusion mix: random
batches padded to their longest row, against `batch_rebalance` (each random batch split into
length-matched micro-batches). The training loss is printed beside: with `batch_rebalance` it is the
same at every micro-batch count (the same rows and loss per optimizer step).

    .venv/bin/python bench/sft_sampling.py --run runs/<run> --steps 40 random:1 batch_rebalance:2 batch_rebalance:4

Each argument is `strategy:micro_batches` (micro-batches per batch of 16 = gradient_accumulation_steps).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from posttrain.env import configure_offline

configure_offline()


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    from posttrain.config.loading import load_config
    from posttrain.config.trainers import SFTTrainerConfig
    from posttrain.training.trainers import sft_args, sft_dataset

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, type=Path, help="a run with mode_fusion_sft (its fusion_mix.jsonl)")
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("settings", nargs="+", help="strategy:micro_batches, e.g. batch_rebalance:4")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config)
    parent = args.run / "rejection_sampling" / "checkpoint"
    parent = parent if parent.is_dir() else args.run / "reasoning_rl" / "checkpoint"
    tokenizer = AutoTokenizer.from_pretrained(parent)
    rows = [json.loads(line) for line in (args.run / "mode_fusion_sft" / "fusion_mix.jsonl").open()]
    fusion = cfg.stage("mode_fusion_sft").trainer
    dataset, _ = sft_dataset(tokenizer, cfg.base.chat, rows, fusion.max_length)
    for setting in args.settings:
        strategy, micro = setting.split(":")
        model = AutoModelForCausalLM.from_pretrained(parent)
        trainer_cfg = SFTTrainerConfig(batch_size=fusion.batch_size, max_steps=args.steps, learning_rate=fusion.learning_rate,
                                       max_length=fusion.max_length, sampling=strategy, gradient_accumulation_steps=int(micro))
        with tempfile.TemporaryDirectory() as out:
            trainer = SFTTrainer(model=model, args=sft_args(trainer_cfg, Path(out), 0), processing_class=tokenizer,
                                 train_dataset=dataset)
            started = time.time()
            result = trainer.train()
            print(json.dumps({"sampling": strategy, "micro_batches": int(micro), "steps": args.steps,
                              "wall_s": round(time.time() - started, 1), "loss": round(result.training_loss, 4)}),
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())
