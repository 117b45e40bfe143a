"""Stage 6 — strong-to-weak distillation (Qwen3 sec. 4.5): the small student learns from the final
teacher. Off-policy phase: SFT on the teacher's verified responses (sequence-level KD). Optional
on-policy phase: TRL's DistillationTrainer (generalised JSD on the student's own samples)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from datasets import Dataset
from trl import SFTTrainer

from posttrain.chat import conversation, user_turn
from posttrain.checkpoint import load_checkpoint, save_checkpoint
from posttrain.config import DistillationStageConfig
from posttrain.datasets import store_for
from posttrain.generation import generate, render_chat_prompts
from posttrain.rewards import VERIFIER_VERSIONS
from posttrain.rewards.format import format_ok
from posttrain.rewards.instruction import instruction_score
from posttrain.rewards.math_verifier import verify_math
from posttrain.schema import StageInputs, StageResult
from posttrain.trainers import common_args, numeric_log, resume_point, sft_args, summary
from posttrain.world.build import WorldPaths, dataset_ref, pool_share, read_jsonl, write_jsonl
from posttrain.world.tasks import instruction_mode

STAGE_VERSION = "distillation/1"


def run(config: DistillationStageConfig, inputs: StageInputs) -> StageResult:
    started = time.time()
    torch.set_num_threads(config.sft.threads)
    work = Path(inputs.work_dir)
    world = WorldPaths(Path(inputs.world_dir))
    if inputs.student is None:
        raise ValueError("distillation needs a student checkpoint (base.student in the config)")
    teacher, tokenizer = load_checkpoint(inputs.parent, for_training=False)
    student, student_tokenizer = load_checkpoint(inputs.student)
    ratio = student.num_parameters() / teacher.num_parameters()
    if ratio > config.max_parameter_ratio:
        raise ValueError(f"student has {ratio:.2f}x the teacher's parameters; "
                         f"stages.distillation.max_parameter_ratio is {config.max_parameter_ratio:.2f}")

    # Prompts: math with and without thinking, plus instruction tasks, in configured shares.
    n_instr = round(config.prompts * config.instruction_share)
    n_no_think = round(config.prompts * config.no_think_share)
    math_source, instr_source = world.file("math_train"), world.file("instruction_train")
    problems = pool_share(read_jsonl(math_source, ("question", "answer", "language")), "distillation")
    problems = problems[:config.prompts - n_instr]
    tasks = pool_share(read_jsonl(instr_source, ("question", "constraints", "thinking")), "distillation")[:n_instr]
    items = [(p, True) for p in problems[n_no_think:]] + [(p, False) for p in problems[:n_no_think]]
    turns = [[user_turn(p["question"], thinking)] for p, thinking in items]
    turns += [[user_turn(t["question"], instruction_mode(t))] for t in tasks]
    responses = generate(teacher, tokenizer, render_chat_prompts(tokenizer, turns),
                         max_new_tokens=config.max_new_tokens, desc="teacher responses")

    # Keep only responses the verifiers accept: the student should not learn the teacher's mistakes.
    rows = []
    for (p, thinking), (g,) in zip(items, responses[:len(items)]):
        verified = verify_math(g.text, p["answer"]).reward == 1 and format_ok(g.text, thinking)
        if not g.truncated and (verified or not config.verified_only):
            rows.append({"messages": conversation(p["question"], g.text, thinking)})
    for t, (g,) in zip(tasks, responses[len(items):]):
        constraints = json.loads(t["constraints"]) if isinstance(t["constraints"], str) else t["constraints"]
        if instruction_score(g.text, constraints) == 1 or not config.verified_only:
            rows.append({"messages": conversation(t["question"], g.text, instruction_mode(t))})
    if not rows:
        raise ValueError(f"the teacher produced no verified response on {len(turns)} prompts: nothing to distil "
                         "(check the teacher's gate results, or set stages.distillation.verified_only: false)")
    del teacher
    data_file = work / "distillation_set.jsonl"
    write_jsonl(rows, data_file)
    store = store_for(inputs)
    produced = store.track(data_file, name=f"{work.parent.name}/distillation_set.jsonl", rows=len(rows))

    trainer = SFTTrainer(model=student, args=sft_args(config.sft, work / "trainer", inputs.seed),
                         train_dataset=Dataset.from_list(rows), processing_class=student_tokenizer)
    trainer.train(resume_from_checkpoint=resume_point(work / "trainer"))
    log = numeric_log(trainer)
    student = trainer.model

    if config.on_policy_steps:
        from trl import DistillationConfig, DistillationTrainer

        teacher, _ = load_checkpoint(inputs.parent, for_training=False)
        args = DistillationConfig(**common_args(work / "on_policy", inputs.seed), learning_rate=config.on_policy_learning_rate,
                                  max_steps=config.on_policy_steps, per_device_train_batch_size=16,
                                  max_completion_length=config.max_new_tokens, save_strategy="no")
        on_policy = DistillationTrainer(model=student, teacher_model=teacher, args=args,
                                        train_dataset=Dataset.from_list([{"prompt": t} for t in turns]),
                                        processing_class=student_tokenizer)
        on_policy.train()
        log += [{**row, "phase_on_policy": 1.0} for row in numeric_log(on_policy)]
        student = on_policy.model

    checkpoint = save_checkpoint(student, student_tokenizer, work / "checkpoint")
    return StageResult(
        name="distillation", checkpoint=checkpoint, parent=inputs.parent,
        datasets_consumed=[dataset_ref(math_source), dataset_ref(instr_source)], datasets_produced=[produced],
        train_log=log, verifier_versions=VERIFIER_VERSIONS,
        train_metrics={"teacher_samples_kept": len(rows), "teacher_samples": len(turns),
                       "parameter_ratio": ratio, **summary(log, ("loss", "mean_token_accuracy"))},
        wall_s=time.time() - started,
    )
