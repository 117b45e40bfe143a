"""Stage 3 — rejection sampling (DeepSeek-R1 sec. 2.3.3): sample K responses per prompt from the RL
policy, keep only verified-correct, well-formed, language-consistent, untruncated ones, deduplicate,
and version the dataset with DVC.

Reads the `rejection_prompts` data role; each row's task kind picks its verifier."""
from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import torch

from posttrain.chat import parse_response
from posttrain.config.pipeline import RejectionSamplingConfig
from posttrain.data.files import read_jsonl, write_jsonl
from posttrain.data.store import store_for
from posttrain.generation.engines import generate_replies, load_generator, release
from posttrain.rewards import VERIFIER_VERSIONS, verify_row
from posttrain.rewards.format import format_ok, mode_ok
from posttrain.rewards.language import language_share
from posttrain.schema import StageInputs, StageResult
from posttrain.training.trainers import require_rows

STAGE_VERSION = "rejection_sampling/2"


def rejection_reason(response, row: dict, min_consistency: float) -> str | None:
    """Why a sample is rejected, or None to keep it."""
    if response.truncated:
        return "truncated"
    score, reason = verify_row(response.text, row)
    if score < 1:
        return f"verifier:{reason}"
    if not (format_ok(response.text, thinking=True) if row["kind"] == "math" else mode_ok(response.text, thinking=True)):
        return "format"
    share = language_share(parse_response(response.text).reasoning or "", row.get("language", "en"))
    if share is not None and share < min_consistency:
        return "mixed_language"
    return None


def run(config: RejectionSamplingConfig, inputs: StageInputs) -> StageResult:
    started = time.time()
    torch.set_num_threads(2)
    work = Path(inputs.work_dir)
    model, tokenizer = load_generator(inputs.parent, inputs.model, config, seed=inputs.seed)

    source = inputs.data["rejection_prompts"]
    problems = require_rows(read_jsonl(Path(source.path)), "rejection_sampling", "rejection_prompts")
    samples = generate_replies(model, tokenizer, inputs.model.chat, [(p["prompt"], True) for p in problems],
                               max_new_tokens=config.max_new_tokens, do_sample=True, temperature=config.temperature,
                               num_samples=config.samples_per_prompt, seed=inputs.seed, desc="rejection sampling")
    release(model)

    reasons: Counter[str] = Counter()
    rows = []
    for problem, responses in zip(problems, samples):
        kept: dict[str, str] = {}  # normalised text -> text: exact duplicates collapse
        for response in responses:
            reason = rejection_reason(response, problem, config.min_language_consistency)
            if reason:
                reasons[reason] += 1
                continue
            key = " ".join(response.text.split())
            if key in kept:
                reasons["duplicate"] += 1
                continue
            kept[key] = response.text
        for text in list(kept.values())[:config.max_per_prompt]:
            rows.append({"messages": problem["prompt"] + [{"role": "assistant", "content": text}], "thinking": True,
                         "kind": problem["kind"], "language": problem.get("language", "en"),
                         "source": "rejection_sampled", "id": problem.get("id")})

    out_file = work / "rejection_sampled.jsonl"
    write_jsonl(rows, out_file)
    produced = store_for(inputs).track(out_file, name=f"{work.parent.name}/rejection_sampled.jsonl", rows=len(rows))

    total = len(problems) * config.samples_per_prompt
    return StageResult(
        name="rejection_sampling", checkpoint=inputs.parent, parent=inputs.parent,
        datasets_consumed=[source], datasets_produced=[produced], verifier_versions=VERIFIER_VERSIONS,
        train_metrics={"kept_rows": len(rows), "prompts": len(problems),
                       "acceptance_rate": (total - sum(reasons.values())) / max(1, total),
                       **{f"rejected/{k}": float(v) for k, v in reasons.items()}},
        wall_s=time.time() - started,
    )
