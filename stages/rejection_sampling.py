"""Stage 3 — rejection sampling (DeepSeek-R1 sec. 2.3.3): sample K responses per prompt from the RL
policy, keep only verified-correct, well-formed, language-consistent, untruncated ones, deduplicate,
mix in non-reasoning data at a fixed ratio, and version the dataset with DVC."""
from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import torch

from posttrain.chat import assemble_response, conversation, parse_response, user_turn
from posttrain.checkpoint import load_checkpoint
from posttrain.config import RejectionSamplingConfig
from posttrain.datasets import store_for
from posttrain.generation import generate, render_chat_prompts
from posttrain.rewards import VERIFIER_VERSIONS
from posttrain.rewards.format import format_ok
from posttrain.rewards.language import language_share
from posttrain.rewards.math_verifier import verify_math
from posttrain.schema import StageInputs, StageResult
from posttrain.world.build import WorldPaths, dataset_ref, pool_share, read_jsonl, write_jsonl

STAGE_VERSION = "rejection_sampling/1"


def rejection_reason(response, gold: str, language: str, min_consistency: float) -> str | None:
    """Why a sample is rejected, or None to keep it."""
    if response.truncated:
        return "truncated"
    verdict = verify_math(response.text, gold)
    if verdict.reward < 1:
        return f"verifier:{verdict.reason}"
    if not format_ok(response.text, thinking=True):
        return "format"
    share = language_share(parse_response(response.text).reasoning or "", language)
    if share is not None and share < min_consistency:
        return "mixed_language"
    return None


def run(config: RejectionSamplingConfig, inputs: StageInputs) -> StageResult:
    started = time.time()
    torch.set_num_threads(2)
    work = Path(inputs.work_dir)
    world = WorldPaths(Path(inputs.world_dir))
    model, tokenizer = load_checkpoint(inputs.parent, for_training=False)

    math_source, direct_source = world.file("math_train"), world.file("direct_train")
    problems = pool_share(read_jsonl(math_source, ("question", "answer", "language")), "rejection_sampling")[:config.prompts]
    prompts = render_chat_prompts(tokenizer, [[user_turn(p["question"], True)] for p in problems])
    samples = generate(model, tokenizer, prompts, max_new_tokens=config.max_new_tokens, do_sample=True,
                       temperature=config.temperature, num_samples=config.samples_per_prompt,
                       seed=inputs.seed, desc="rejection sampling")

    reasons: Counter[str] = Counter()
    reasoning_rows = []
    for problem, responses in zip(problems, samples):
        kept: dict[str, str] = {}  # normalised text -> text: exact duplicates collapse
        for response in responses:
            reason = rejection_reason(response, problem["answer"], problem["language"],
                                      config.min_language_consistency)
            if reason:
                reasons[reason] += 1
                continue
            key = " ".join(response.text.split())
            if key in kept:
                reasons["duplicate"] += 1
                continue
            kept[key] = response.text
        for text in list(kept.values())[:config.max_per_prompt]:
            reasoning_rows.append({"messages": conversation(problem["question"], text, thinking=True),
                                   "source": "rejection_sampled", "id": problem["id"]})

    # Non-reasoning share: direct questions answered without thinking (R1 mixed ~600k : 200k).
    rng = random.Random(inputs.seed)
    direct = read_jsonl(direct_source, ("question", "answer"))
    n_direct = round(len(reasoning_rows) / config.reasoning_to_non_reasoning)
    direct_rows = [{"messages": conversation(d["question"], assemble_response("", d["answer"]), thinking=False),
                    "source": "non_reasoning", "id": d["id"]} for d in rng.sample(direct, min(n_direct, len(direct)))]
    rows = reasoning_rows + direct_rows
    rng.shuffle(rows)

    out_file = work / "rejection_sampled.jsonl"
    write_jsonl(rows, out_file)
    store = store_for(inputs)
    produced = store.track(out_file, name=f"{work.parent.name}/rejection_sampled.jsonl", rows=len(rows))

    total = len(problems) * config.samples_per_prompt
    return StageResult(
        name="rejection_sampling", checkpoint=inputs.parent, parent=inputs.parent,
        datasets_consumed=[dataset_ref(math_source), dataset_ref(direct_source)], datasets_produced=[produced],
        verifier_versions=VERIFIER_VERSIONS,
        train_metrics={"kept_rows": len(rows), "reasoning_rows": len(reasoning_rows), "non_reasoning_rows": len(direct_rows),
                       "acceptance_rate": (total - sum(reasons.values())) / max(1, total),
                       **{f"rejected/{k}": float(v) for k, v in reasons.items()}},
        wall_s=time.time() - started,
    )
