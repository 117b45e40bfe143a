"""Stage 1 — cold-start SFT (DeepSeek-R1 sec. 2.3.1): a few hundred long-CoT examples in the target
format (think block, then one boxed answer) so RL starts from readable, well-formed reasoning."""
from __future__ import annotations

import random
import time
from pathlib import Path

import torch
from datasets import Dataset
from trl import SFTTrainer

from posttrain.chat import assemble_response, conversation
from posttrain.checkpoint import load_checkpoint, save_checkpoint
from posttrain.config import ColdStartSFTConfig
from posttrain.schema import StageInputs, StageResult
from posttrain.trainers import numeric_log, resume_point, sft_args, summary
from posttrain.world.build import WorldPaths, dataset_ref, pool_share, read_jsonl
from posttrain.world.reflection import answer_only, with_check
from posttrain.world.tasks import default_math_answer, render_reasoning

STAGE_VERSION = "cold_start_sft/1"


def run(config: ColdStartSFTConfig, inputs: StageInputs) -> StageResult:
    started = time.time()
    torch.set_num_threads(config.trainer.threads)
    work = Path(inputs.work_dir)
    model, tokenizer = load_checkpoint(inputs.parent)

    # Data: worked solutions in the target format, in each problem's own language only.
    source = WorldPaths(Path(inputs.world_dir)).file("math_train")
    fields = ("question", "answer", "reasoning", "language", "level", "op", "a", "b")
    pool = pool_share(read_jsonl(source, fields), "cold_start")
    problems = [p for p in pool if p["level"] in config.levels][:config.examples]
    rows, altered = sft_rows(problems, config, inputs.seed)

    trainer = SFTTrainer(model=model, args=sft_args(config.trainer, work / "trainer", inputs.seed),
                         train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    trainer.train(resume_from_checkpoint=resume_point(work / "trainer"))

    log = numeric_log(trainer)
    checkpoint = save_checkpoint(trainer.model, tokenizer, work / "checkpoint")
    return StageResult(
        name="cold_start_sft", checkpoint=checkpoint, parent=inputs.parent,
        datasets_consumed=[dataset_ref(source)], train_log=log,
        train_metrics={"examples": len(rows), **altered,
                       **summary(log, ("loss", "mean_token_accuracy"))},
        wall_s=time.time() - started,
    )


def sft_rows(problems: list[dict], config: ColdStartSFTConfig, seed: int) -> tuple[list[dict], dict[str, int]]:
    """Chat rows (think block, then the boxed answer sentence) and how many of them were altered.

    The alterations are off in the pipeline; the RL benches switch them on to give RL something
    to remove: `mixed_language_share` renders a solution's steps half in the other language (what
    R1's language-consistency reward is for), `double_check_share` appends a redundant check (what
    a length reward is for), `answer_only_share` states the result without the working (what
    the correctness reward alone should teach the policy to stop doing).
    """
    mix, check = random.Random(f"mixed_language/{seed}"), random.Random(f"double_check/{seed}")
    skip = random.Random(f"answer_only/{seed}")
    rows, altered = [], {"double_checked": 0, "mixed_language": 0, "answer_only": 0}
    for p in problems:
        # Every draw is made for every problem, so a row one alteration leaves alone is the row
        # the others would give without it.
        reasoning = p["reasoning"]
        if mix.random() < config.mixed_language_share:
            reasoning = render_reasoning(p["op"], p["a"], p["b"], p["language"], english_step_share=0.5, rng=mix)
        mixed = reasoning != p["reasoning"]   # every step may draw its own language
        checked = check.random() < config.double_check_share
        if checked:
            reasoning = with_check(reasoning, p["op"], p["a"], p["b"], p["language"])
        if skip.random() < config.answer_only_share:
            reasoning = answer_only(p["op"], p["a"], p["b"], p["language"])
            altered["answer_only"] += 1
        else:
            altered["mixed_language"] += mixed
            altered["double_checked"] += checked
        response = assemble_response(reasoning, default_math_answer(p["answer"], p["language"]))
        rows.append({"messages": conversation(p["question"], response, thinking=True)})
    return rows, altered
