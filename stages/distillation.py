"""Stage 6 — strong-to-weak distillation (Qwen3 sec. 4.5): the small student learns from the final
teacher. Off-policy phase: SFT on the teacher's verified responses to the `distillation_prompts`
data role, in each prompt's mode (sequence-level KD). Optional on-policy phase: TRL's
DistillationTrainer (generalised JSD on the student's own samples)."""
from __future__ import annotations

import time
from pathlib import Path

import torch
from datasets import Dataset
from trl import SFTTrainer

from posttrain.chat import render_prompt, without_thinking
from posttrain.registry.checkpoint import load_checkpoint, save_checkpoint
from posttrain.config.pipeline import DistillationStageConfig
from posttrain.data.files import read_jsonl, write_jsonl
from posttrain.data.store import store_for
from posttrain.generation.engines import generate_replies, load_generator, release
from posttrain.registry.live_metrics import follow
from posttrain.rewards import VERIFIER_VERSIONS, verify_row
from posttrain.rewards.format import format_ok, mode_ok
from posttrain.schema import StageInputs, StageResult
from posttrain.training.trainers import common_args, numeric_log, peft_config, require_rows, resume_point, sft_args, sft_dataset, summary

STAGE_VERSION = "distillation/4"


def trusted(text: str, row: dict, thinking: bool | None) -> bool:
    """A teacher reply the student may learn: verified, and in the mode its prompt was rendered in
    (`Generation.thinking`: a row without a `thinking` column is judged in its rendering's mode,
    never as "not thinking"; None where the prompt asked for no mode)."""
    if row["kind"] == "math":
        shape_ok = format_ok(text, thinking)
    else:
        shape_ok = thinking is None or mode_ok(text, thinking)
    return shape_ok and verify_row(text, row)[0] == 1


def no_think_form(thinking_reply: str, row: dict) -> str | None:
    """A verified thinking-mode reply as the `/no_think` reply `row` asks for: its answer after an
    empty think block (mode fusion's no-think pairs), if that still passes `row`'s checks."""
    text = without_thinking(thinking_reply)
    return text if trusted(text, row, False) else None


def with_resampled(teacher, tokenizer, chat, config: DistillationStageConfig, prompts: list[dict],
                   texts: list[str | None], seed: int) -> list[str | None]:
    """Rejection sampling from the teacher for the prompts its greedy reply failed: `config.resample`
    samples each, in the prompt's own mode, the first verified one kept. Greedy decoding alone
    keeps only the prompts the teacher gets right every time, and instruction rows are then too
    few for the student to follow instructions as its teacher does (bench/results/time_bound.md)."""
    kinds = config.resample_kinds
    refused = [i for i, (p, t) in enumerate(zip(prompts, texts)) if t is None and (kinds is None or p["kind"] in kinds)]
    if not config.resample or not refused:
        return texts
    drawn = generate_replies(teacher, tokenizer, chat, [(prompts[i]["prompt"], prompts[i].get("thinking")) for i in refused],
                             max_new_tokens=config.max_new_tokens, do_sample=True, temperature=config.resample_temperature,
                             num_samples=config.resample, seed=seed, desc="teacher responses, resampled")
    texts = list(texts)
    for i, samples in zip(refused, drawn):
        texts[i] = next((g.text for g in samples if not g.truncated and trusted(g.text, prompts[i], g.thinking)), None)
    return texts


def with_no_think_from_thinking(teacher, tokenizer, chat, prompts: list[dict], texts: list[str | None],
                                max_new_tokens: int) -> list[str | None]:
    """A `/no_think` prompt whose reply was refused is asked again in thinking mode, and the verified
    answer is taught after an empty think block. Without this the switch hardly reaches the student:
    a teacher that answers math right mostly when it thinks (the default's: 1% without) has almost
    no verified `/no_think` math reply, and students followed `/no_think` on 25-71% of prompts
    (bench/results/time_bound.md)."""
    refused = [i for i, (p, t) in enumerate(zip(prompts, texts)) if t is None and p.get("thinking") is False]
    if not refused:
        return texts
    thought = generate_replies(teacher, tokenizer, chat, [(prompts[i]["prompt"], True) for i in refused],
                               max_new_tokens=max_new_tokens, desc="teacher responses, thinking, for /no_think")
    texts = list(texts)
    for i, (g,) in zip(refused, thought):
        if not g.truncated and trusted(g.text, prompts[i], g.thinking):
            texts[i] = no_think_form(g.text, prompts[i])
    return texts


def run(config: DistillationStageConfig, inputs: StageInputs) -> StageResult:
    started = time.time()
    torch.set_num_threads(config.sft.threads)
    work = Path(inputs.work_dir)
    chat = inputs.model.chat
    if inputs.student is None:
        raise ValueError("distillation needs a student checkpoint (base.student in the config)")
    teacher, tokenizer = load_generator(inputs.parent, inputs.model, config, seed=inputs.seed)
    student, student_tokenizer = load_checkpoint(inputs.student, settings=inputs.model)
    ratio = student.num_parameters() / teacher.num_parameters()
    if ratio > config.max_parameter_ratio:
        raise ValueError(f"student has {ratio:.2f}x the teacher's parameters; "
                         f"stages.distillation.max_parameter_ratio is {config.max_parameter_ratio:.2f}")

    source = inputs.data["distillation_prompts"]
    prompts = require_rows(read_jsonl(Path(source.path)), "distillation", "distillation_prompts")
    replies = generate_replies(teacher, tokenizer, chat, [(p["prompt"], p.get("thinking")) for p in prompts],
                               max_new_tokens=config.max_new_tokens, desc="teacher responses")

    # Keep only responses the verifiers accept: the student should not learn the teacher's mistakes.
    texts = [g.text if not config.verified_only or (not g.truncated and trusted(g.text, p, g.thinking)) else None
             for p, (g,) in zip(prompts, replies)]
    if config.verified_only:
        texts = with_resampled(teacher, tokenizer, chat, config, prompts, texts, inputs.seed)
        texts = with_no_think_from_thinking(teacher, tokenizer, chat, prompts, texts, config.max_new_tokens)
    rows = [{"messages": p["prompt"] + [{"role": "assistant", "content": t}], "thinking": p.get("thinking"),
             "kind": p["kind"]} for p, t in zip(prompts, texts) if t is not None]
    rows = require_rows(rows, "distillation", f"the teacher's verified responses to {len(prompts)} prompts (check the "
                        "teacher's gate results, or set stages.distillation.verified_only: false)")
    release(teacher)
    del teacher
    data_file = work / "distillation_set.jsonl"
    write_jsonl(rows, data_file)
    produced = store_for(inputs).track(data_file, name=f"{work.parent.name}/distillation_set.jsonl", rows=len(rows))

    dataset, notes = sft_dataset(student_tokenizer, chat, rows, config.sft.max_length,
                                 "stages.distillation.sft.max_length")
    trainer = SFTTrainer(model=student, args=sft_args(config.sft, work / "trainer", inputs.seed),
                         train_dataset=dataset, processing_class=student_tokenizer, peft_config=peft_config(config.sft))
    follow(trainer, inputs)
    trainer.train(resume_from_checkpoint=resume_point(work / "trainer"))
    log = numeric_log(trainer)
    student = trainer.model.merge_and_unload() if hasattr(trainer.model, "merge_and_unload") else trainer.model

    if config.on_policy_steps:
        student, on_policy_log = on_policy_phase(config, inputs, student, student_tokenizer, prompts,
                                                 step_offset=trainer.state.global_step)
        log += on_policy_log

    checkpoint = save_checkpoint(student, student_tokenizer, work / "checkpoint")
    return StageResult(
        name="distillation", checkpoint=checkpoint, parent=inputs.parent,
        datasets_consumed=[source], datasets_produced=[produced],
        train_log=log, verifier_versions=VERIFIER_VERSIONS,
        train_metrics={"teacher_samples_kept": len(rows), "teacher_samples": len(prompts),
                       "teacher_tokens": float(sum(g.num_tokens for (g,) in replies)),
                       "kept_no_think": float(sum(r["thinking"] is False for r in rows)),
                       "kept_instruction": float(sum(r["kind"] == "instruction" for r in rows)),
                       "parameter_ratio": ratio, **summary(log, ("loss", "mean_token_accuracy"))},
        wall_s=time.time() - started, alerts=notes,
    )


def on_policy_phase(config: DistillationStageConfig, inputs: StageInputs, student, student_tokenizer,
                    prompts: list[dict], step_offset: int = 0) -> tuple[object, list[dict]]:
    """`on_policy_steps` of TRL's DistillationTrainer (generalised JSD between teacher and student
    on the student's own samples of the prompts, each in its mode); (student, its log)."""
    from trl import DistillationConfig, DistillationTrainer

    work, chat = Path(inputs.work_dir), inputs.model.chat
    teacher, _ = load_checkpoint(inputs.parent, for_training=False, settings=inputs.model)
    args = DistillationConfig(**common_args(work / "on_policy", inputs.seed, config.sft),
                              learning_rate=config.on_policy_learning_rate, max_steps=config.on_policy_steps,
                              per_device_train_batch_size=16, max_completion_length=config.max_new_tokens,
                              save_strategy="no")
    prompt_texts = [render_prompt(student_tokenizer, chat, p["prompt"], p.get("thinking"))[0] for p in prompts]
    on_policy = DistillationTrainer(model=student, teacher_model=teacher, args=args,
                                    train_dataset=Dataset.from_list([{"prompt": t} for t in prompt_texts]),
                                    processing_class=student_tokenizer)
    follow(on_policy, inputs, step_offset=step_offset)  # its curve continues the SFT phase's
    on_policy.train()
    return on_policy.model, [{**row, "phase_on_policy": 1.0} for row in numeric_log(on_policy)]
