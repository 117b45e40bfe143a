"""TRL trainer arguments from our configs, with CPU-safe settings spelled out (TRL defaults bf16
and gradient checkpointing on), plus the bits every training stage shares."""
from __future__ import annotations

import math
from pathlib import Path

import torch
from transformers.trainer_utils import get_last_checkpoint

from posttrain.config import GRPOTrainerConfig, SFTTrainerConfig


def common_args(output_dir: Path, seed: int) -> dict:
    use_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return dict(output_dir=str(output_dir), seed=seed, data_seed=seed, bf16=use_bf16, fp16=False,
                gradient_checkpointing=False, report_to="none", logging_steps=1,
                dataloader_num_workers=0, disable_tqdm=False, use_cpu=not torch.cuda.is_available())


def sft_args(cfg: SFTTrainerConfig, output_dir: Path, seed: int):
    """SFT on pre-tokenized rows with a completion mask (`sft_dataset`): the loss falls on the
    replies only, with any chat template (TRL's assistant_only_loss needs `{% generation %}` marks)."""
    from trl import SFTConfig

    return SFTConfig(
        **common_args(output_dir, seed), learning_rate=cfg.learning_rate, num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps, per_device_train_batch_size=cfg.batch_size, max_length=cfg.max_length,
        warmup_steps=cfg.warmup_ratio, weight_decay=cfg.weight_decay, lr_scheduler_type="cosine",
        completion_only_loss=True, assistant_only_loss=False, packing=False, save_strategy="no",
    )


class NoUsableRows(ValueError):
    pass


def require_rows(rows: list, stage: str, what: str) -> list:
    """A stage never trains on nothing: zero usable rows is an error that says which data it lacked."""
    if not rows:
        raise NoUsableRows(f"{stage}: no usable rows in {what}; check the data source (posttrain data check) "
                           "before training")
    return rows


def sft_dataset(tokenizer, chat, rows: list[dict]):
    """Tokenized conversations (`messages` rows) with their completion masks, as SFTTrainer takes them."""
    from datasets import Dataset

    from posttrain.chat import sft_example

    return Dataset.from_list([sft_example(tokenizer, chat, r["messages"], r.get("thinking")) for r in rows])


def grpo_args(cfg: GRPOTrainerConfig, output_dir: Path, seed: int, reward_weights: list[float]):
    """GRPO settings for a posttrain.rl trainer (both its samplers, our adaptive ProblemSampler and
    TRL's order, resume through the Trainer's data skip)."""
    from trl import GRPOConfig

    return GRPOConfig(
        **common_args(output_dir, seed), learning_rate=cfg.learning_rate, max_steps=cfg.max_steps,
        # TRL counts completions, not prompts, in the per-device batch.
        per_device_train_batch_size=cfg.prompts_per_step * cfg.num_generations,
        num_generations=cfg.num_generations, max_completion_length=cfg.max_completion_length,
        temperature=cfg.temperature, loss_type=cfg.loss_type, scale_rewards=cfg.scale_rewards,
        beta=cfg.beta, epsilon=cfg.epsilon, epsilon_high=cfg.epsilon_high, num_iterations=cfg.num_iterations,
        mask_truncated_completions=cfg.mask_truncated_completions, reward_weights=reward_weights,
        warmup_steps=cfg.warmup_ratio, lr_scheduler_type="constant_with_warmup" if cfg.warmup_ratio else "constant",
        save_strategy="steps", save_steps=cfg.save_steps, save_total_limit=1, top_k=0,
        # On resume the Trainer skips the batches of the current epoch already trained on, and then
        # reloads the RNG state of the checkpoint. TRL's order replays them to skip them; our problem
        # sampler yields stand-ins that draw nothing, then the batches it had drawn ahead of training.
        ignore_data_skip=False,
    )


def resume_point(output_dir: Path) -> str | None:
    """The last in-stage trainer checkpoint, so a retried stage continues instead of restarting."""
    if not output_dir.is_dir():
        return None
    return get_last_checkpoint(str(output_dir))


def numeric_log(trainer) -> list[dict]:
    rows = []
    for entry in trainer.state.log_history:
        row = {k: float(v) for k, v in entry.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))}
        if row:
            rows.append(row)
    return rows


def summary(log: list[dict], keys: tuple[str, ...]) -> dict[str, float]:
    """Mean of the last few logged values of each key (the end-of-stage training state)."""
    out = {}
    for key in keys:
        values = [row[key] for row in log if key in row]
        if values:
            tail = values[-5:]
            out[key] = sum(tail) / len(tail)
    return out


def grpo_dataset(tokenizer, chat, rows: list[dict]):
    """Prompt rows as GRPOTrainer takes them: the prompt rendered once here (with the row's mode
    switch, the way the model family reads it), the reply's pre-filled part beside it (`prefill`,
    put back in front by `posttrain.rewards.on_whole_replies`), and every column a reward reads."""
    import json

    from datasets import Dataset

    from posttrain.chat import render_prompt

    out = []
    for i, row in enumerate(rows):
        prompt, prefill = render_prompt(tokenizer, chat, row["prompt"], row.get("thinking"))
        out.append({"prompt": prompt, "prefill": prefill, "kind": row["kind"], "answer": row.get("answer", ""),
                    "constraints": json.dumps(row["constraints"], ensure_ascii=False) if "constraints" in row else "",
                    "tests": json.dumps(row["tests"]) if "tests" in row else "",
                    "language": row.get("language", "en"), "thinking": bool(row.get("thinking")),
                    "problem_index": i})
    return Dataset.from_list(out)
