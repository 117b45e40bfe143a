"""Stage 4 — thinking / non-thinking mode fusion (Qwen3 sec. 4.3): one SFT over thinking samples
(the rejection-sampled set, plus the `thinking` data role) and non-thinking samples (an empty think
block: no-think copies of the rejection-sampled prompts, plus the `non_reasoning` data role),
each asked with its mode switch."""
from __future__ import annotations

import random
import time
from pathlib import Path

import torch
from trl import SFTTrainer

from posttrain.chat import without_thinking
from posttrain.registry.checkpoint import load_checkpoint
from posttrain.config.pipeline import ModeFusionSFTConfig
from posttrain.data.files import read_jsonl, write_jsonl
from posttrain.data.store import store_for
from posttrain.registry.live_metrics import follow
from posttrain.schema import StageInputs, StageResult
from posttrain.training.trainers import numeric_log, peft_config, require_rows, resume_point, save_trained, sft_args, sft_dataset, summary

STAGE_VERSION = "mode_fusion_sft/4"


def no_think_copy(row: dict) -> dict:
    """The same prompt answered without thinking: the verified answer after an empty think block.
    With paired prompts the mode switch is the only cue that separates the two modes, so the model
    has to learn to read it (unpaired, a tiny model keys on the question wording instead and falls
    into the wrong mode on unseen templates: measured on held-out sets)."""
    *prompt, reply = row["messages"]
    return {**row, "messages": prompt + [{"role": "assistant", "content": without_thinking(reply["content"])}],
            "thinking": False, "source": "no_think_pair"}


def run(config: ModeFusionSFTConfig, inputs: StageInputs) -> StageResult:
    started = time.time()
    torch.set_num_threads(config.trainer.threads)
    work = Path(inputs.work_dir)
    rng = random.Random(inputs.seed)
    model, tokenizer = load_checkpoint(inputs.parent, settings=inputs.model)

    # Thinking samples: the rejection-sampled set of stage 3 (its DVC-tracked file).
    sampled_ref = next((d for d in inputs.datasets if d.name.endswith("rejection_sampled.jsonl")), None)
    if sampled_ref is None:
        raise ValueError("mode_fusion_sft needs the rejection_sampling dataset; run stage rejection_sampling first")
    store = store_for(inputs)
    sampled = read_jsonl(store.restore(sampled_ref))
    # One no-think copy per prompt (the first kept sample's answer).
    first_per_prompt = list({" ".join(m["content"] for m in r["messages"][:-1]): r for r in reversed(sampled)}.values())
    pairs = [no_think_copy(r) for r in reversed(first_per_prompt)][:config.no_think_pairs]
    tagged = [{**r, "source": r.get("source") or role} for role, ref in sorted(inputs.data.items())
              for r in read_jsonl(Path(ref.path))]
    rows = require_rows(sampled + pairs + tagged, "mode_fusion_sft", "the rejection-sampled set and data roles")
    rng.shuffle(rows)
    mix_file = work / "fusion_mix.jsonl"
    write_jsonl(rows, mix_file)
    produced = store.track(mix_file, name=f"{work.parent.name}/fusion_mix.jsonl", rows=len(rows))

    dataset, notes = sft_dataset(tokenizer, inputs.model.chat, rows, config.trainer.max_length,
                                 "stages.mode_fusion_sft.trainer.max_length")
    trainer = SFTTrainer(model=model, args=sft_args(config.trainer, work / "trainer", inputs.seed),
                         train_dataset=dataset, processing_class=tokenizer, peft_config=peft_config(config.trainer))
    follow(trainer, inputs)
    trainer.train(resume_from_checkpoint=resume_point(work / "trainer"))

    log = numeric_log(trainer)
    checkpoint, adapter = save_trained(trainer, tokenizer, work, inputs.parent)
    sources = sorted({r["source"] for r in rows})
    counts = {f"rows/{s}": float(sum(r["source"] == s for r in rows)) for s in sources}
    modes = {f"rows/{m}": float(sum(r.get("thinking") is v for r in rows))
             for m, v in (("think", True), ("no_think", False))}
    return StageResult(
        name="mode_fusion_sft", checkpoint=checkpoint, parent=inputs.parent, adapter=adapter,
        datasets_consumed=[sampled_ref, *inputs.data.values()],
        datasets_produced=[produced], train_log=log,
        train_metrics={"examples": len(rows), **counts, **modes, **summary(log, ("loss", "mean_token_accuracy"))},
        wall_s=time.time() - started, alerts=notes,
    )
