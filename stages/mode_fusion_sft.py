"""Stage 4 — thinking / non-thinking mode fusion (Qwen3 sec. 4.3): one SFT over thinking samples
(the rejection-sampled set) and non-thinking samples (empty think block), selected by `/think` and
`/no_think`, plus a small share of instruction-following examples."""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

import torch
from datasets import Dataset
from trl import SFTTrainer

from posttrain.chat import assemble_response, conversation
from posttrain.checkpoint import load_checkpoint, save_checkpoint
from posttrain.config import ModeFusionSFTConfig
from posttrain.datasets import store_for
from posttrain.schema import StageInputs, StageResult
from posttrain.trainers import numeric_log, resume_point, sft_args, summary
from posttrain.world.build import WorldPaths, dataset_ref, pool_share, read_jsonl, write_jsonl
from posttrain.world.tasks import default_math_answer, instruction_mode

STAGE_VERSION = "mode_fusion_sft/3"


def run(config: ModeFusionSFTConfig, inputs: StageInputs) -> StageResult:
    started = time.time()
    torch.set_num_threads(config.trainer.threads)
    work = Path(inputs.work_dir)
    world = WorldPaths(Path(inputs.world_dir))
    rng = random.Random(inputs.seed)
    model, tokenizer = load_checkpoint(inputs.parent)

    # Thinking samples: the rejection-sampled set of stage 3 (its DVC-tracked file).
    thinking_ref = next((d for d in inputs.datasets if d.name.endswith("rejection_sampled.jsonl")), None)
    if thinking_ref is None:
        raise ValueError("mode_fusion_sft needs the rejection_sampling dataset; run stage rejection_sampling first")
    store = store_for(inputs)
    thinking_rows = read_jsonl(store.restore(thinking_ref), ("messages",))

    # Non-thinking samples: the SAME problems as the thinking samples, answered after an empty think
    # block. With paired prompts the `/think` / `/no_think` suffix is the only cue that separates the
    # two modes, so the model has to learn to read it (unpaired, a tiny model keys on the question
    # wording instead and falls into the wrong mode on unseen templates: measured on held-out sets).
    math_rows = {p["id"]: p for p in read_jsonl(world.file("math_train"), ("id", "question", "answer", "language",
                                                                             "reasoning"))}
    # Replayed cold-start solutions keep thinking-mode math anchored while the no-think and
    # instruction rows pull the policy elsewhere; the RS set alone is small and biased to easy items.
    replay = pool_share(list(math_rows.values()), "cold_start")[:config.cold_start_replay]
    thinking_rows = thinking_rows + [
        {"messages": conversation(p["question"], assemble_response(
            p["reasoning"], default_math_answer(p["answer"], p["language"])), thinking=True),
         "source": "cold_start_replay"} for p in replay]
    paired = [math_rows[r["id"]] for r in thinking_rows if r.get("id") in math_rows]
    extra = pool_share(list(math_rows.values()), "mode_fusion")
    no_think_math = list({p["id"]: p for p in paired + extra}.values())[:config.no_think_math]
    no_think_rows = [{"messages": conversation(p["question"], assemble_response("", default_math_answer(p["answer"], p["language"])), thinking=False),
                      "source": "no_think_math"} for p in no_think_math]
    direct = pool_share(read_jsonl(world.file("direct_train"), ("question", "answer")), "mode_fusion")
    no_think_rows += [{"messages": conversation(d["question"], assemble_response("", d["answer"]), thinking=False),
                       "source": "no_think_direct"} for d in direct[:config.no_think_direct]]
    instr = pool_share(read_jsonl(world.file("instruction_train"), ("question", "gold_response", "constraints", "thinking")), "mode_fusion")
    instruction_rows = [{"messages": conversation(t["question"], t["gold_response"], instruction_mode(t)),
                         "source": "instruction"} for t in instr[:config.instruction_examples]]

    rows = [{"messages": r["messages"], "source": r.get("source", "")} for r in thinking_rows + no_think_rows + instruction_rows]
    rng.shuffle(rows)
    mix_file = work / "fusion_mix.jsonl"
    write_jsonl(rows, mix_file)
    produced = store.track(mix_file, name=f"{work.parent.name}/fusion_mix.jsonl", rows=len(rows))

    trainer = SFTTrainer(model=model, args=sft_args(config.trainer, work / "trainer", inputs.seed),
                         train_dataset=Dataset.from_list([{"messages": r["messages"]} for r in rows]),
                         processing_class=tokenizer)
    trainer.train(resume_from_checkpoint=resume_point(work / "trainer"))

    log = numeric_log(trainer)
    checkpoint = save_checkpoint(trainer.model, tokenizer, work / "checkpoint")
    counts = {f"rows/{s}": float(sum(r["source"] == s for r in rows)) for s in {r["source"] for r in rows}}
    return StageResult(
        name="mode_fusion_sft", checkpoint=checkpoint, parent=inputs.parent,
        datasets_consumed=[thinking_ref, dataset_ref(world.file("math_train")), dataset_ref(world.file("direct_train")),
                           dataset_ref(world.file("instruction_train"))],
        datasets_produced=[produced], train_log=log,
        train_metrics={"examples": len(rows), **counts, **summary(log, ("loss", "mean_token_accuracy"))},
        wall_s=time.time() - started,
    )
