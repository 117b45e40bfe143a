"""The one evaluation loop: a checkpoint on the held-out capability suites.

Suites (from the world's eval files): math in English and Chinese with `/think`, math with
`/no_think`, instruction following, direct (non-reasoning) questions. Per-item outcomes are kept
so gates can compare two checkpoints on the same items (paired), not two noisy means.
"""
from __future__ import annotations

import json
import statistics
import unicodedata
from pathlib import Path

import torch

from posttrain.chat import parse_response, user_turn
from posttrain.checkpoint import load_checkpoint
from posttrain.config import PipelineConfig
from posttrain.generation import generate, render_chat_prompts
from posttrain.rewards.format import format_ok, mode_ok
from posttrain.rewards.instruction import instruction_score
from posttrain.rewards.language import language_share
from posttrain.rewards.math_verifier import verify_math
from posttrain.schema import CheckpointRef, EvalResult
from posttrain.world.build import WorldPaths, read_jsonl
from posttrain.world.tasks import instruction_mode


# Part of the evaluation cache key: bump when a metric's definition changes, so cached verdicts of
# the old definition are not reused (eval/2: /no_think compliance is the mode switch alone).
EVAL_VERSION = "eval/2"


def _normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).strip().rstrip(".。!！").strip()
    return text.casefold()


def reasoning_consistency(response: str, language: str) -> float:
    parsed = parse_response(response)
    if parsed.reasoning is None or not parsed.reasoning:
        return 0.0
    share = language_share(parsed.reasoning, language)
    return 1.0 if share is None else share


def evaluate(checkpoint: CheckpointRef | str | Path, cfg: PipelineConfig, *, model=None, tokenizer=None,
             desc: str = "evaluating") -> EvalResult:
    torch.set_num_threads(cfg.evaluation.threads)
    if model is None:
        model, tokenizer = load_checkpoint(checkpoint, for_training=False)
    world = WorldPaths(cfg.path(cfg.paths.world))
    math = read_jsonl(world.file("eval_math"), ("question", "answer", "language"))
    no_think = read_jsonl(world.file("eval_no_think"), ("question", "answer", "language"))
    instr = read_jsonl(world.file("eval_instruction"), ("question", "constraints", "thinking"))
    direct = read_jsonl(world.file("eval_direct"), ("question", "answer"))

    conversations = ([[user_turn(r["question"], True)] for r in math]
                     + [[user_turn(r["question"], False)] for r in no_think]
                     + [[user_turn(r["question"], instruction_mode(r))] for r in instr]
                     + [[user_turn(r["question"], False)] for r in direct])
    outputs = generate(model, tokenizer, render_chat_prompts(tokenizer, conversations),
                       max_new_tokens=cfg.evaluation.max_new_tokens, batch_size=cfg.evaluation.batch_size,
                       desc=desc)
    gens = [o[0] for o in outputs]
    g_math = gens[:len(math)]
    g_nt = gens[len(math):len(math) + len(no_think)]
    g_if = gens[len(math) + len(no_think):len(math) + len(no_think) + len(instr)]
    g_direct = gens[len(math) + len(no_think) + len(instr):]

    correct = [verify_math(g.text, r["answer"]).reward for g, r in zip(g_math, math)]
    fmt = [float(format_ok(g.text, thinking=True)) for g in g_math]
    consistency = [reasoning_consistency(g.text, r["language"]) for g, r in zip(g_math, math)]
    with_reasoning = [c for g, c in zip(g_math, consistency) if parse_response(g.text).reasoning]
    # Compliance is the mode switch (empty think block); the boxed-answer form is reported apart,
    # since answering a math question with the wrong kind of answer is not thinking by mistake.
    nt_ok = [float(mode_ok(g.text, thinking=False)) for g in g_nt]
    nt_format = [float(format_ok(g.text, thinking=False)) for g in g_nt]
    nt_correct = [verify_math(g.text, r["answer"]).reward for g, r in zip(g_nt, no_think)]
    if_ok = [instruction_score(g.text, json.loads(r["constraints"]) if isinstance(r["constraints"], str)
                               else r["constraints"]) for g, r in zip(g_if, instr)]
    direct_ok = [float(_normalise(parse_response(g.text).answer) == _normalise(r["answer"]))
                 for g, r in zip(g_direct, direct)]
    truncated = [float(g.truncated) for g in g_math]

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    len_correct = [g.num_tokens for g, c in zip(g_math, correct) if c]
    len_wrong = [g.num_tokens for g, c in zip(g_math, correct) if not c]
    by_lang = {lang: [c for c, r in zip(correct, math) if r["language"] == lang] for lang in ("en", "zh")}
    metrics = {
        "math_accuracy": mean(correct),
        "math_accuracy_en": mean(by_lang["en"]),
        "math_accuracy_zh": mean(by_lang["zh"]),
        "format_rate": mean(fmt),
        "language_consistency": mean(consistency),
        "mixed_language_rate": mean([float(c < 1.0) for c in with_reasoning]),
        "no_think_compliance": mean(nt_ok),
        "no_think_format": mean(nt_format),
        "no_think_accuracy": mean(nt_correct),
        "instruction_accuracy": mean(if_ok),
        "direct_accuracy": mean(direct_ok),
        "mean_len_correct": mean(len_correct),
        "mean_len_wrong": mean(len_wrong),
        "truncation_rate": mean(truncated),
    }
    per_item = {
        "math_accuracy": correct, "format_rate": fmt, "language_consistency": consistency,
        "no_think_compliance": nt_ok, "no_think_format": nt_format, "no_think_accuracy": nt_correct, "instruction_accuracy": if_ok,
        "direct_accuracy": direct_ok, "truncation_rate": truncated,
    }
    samples = []
    for name, rows, suite_gens in (("math", math, g_math), ("no_think", no_think, g_nt),
                                   ("instruction", instr, g_if), ("direct", direct, g_direct)):
        for r, g in list(zip(rows, suite_gens))[:2]:
            samples.append({"suite": name, "question": r["question"], "response": g.text})
    return EvalResult(metrics=metrics, per_item=per_item, samples=samples)


def math_generations(model, tokenizer, cfg: PipelineConfig, questions: list[str], *, desc: str,
                     **sampling) -> list[list]:
    """Thinking-mode answers to math questions within the evaluation's token budget: greedy, or
    sampled with `sampling` (do_sample, temperature, top_p, num_samples, seed) as `generate` takes
    them. For measures beyond `evaluate`'s greedy suite (sampled pass@1, pass@k, re-phrased items)."""
    prompts = render_chat_prompts(tokenizer, [[user_turn(q, True)] for q in questions])
    return generate(model, tokenizer, prompts, max_new_tokens=cfg.evaluation.max_new_tokens,
                    batch_size=cfg.evaluation.batch_size, desc=desc, **sampling)


def math_by_kind(world_dir: Path, scores: list[float]) -> dict[str, float]:
    """Mean of per-item scores on the held-out math suite (pass@1, or any per-problem score) by
    level and operation ("L2*": level-2 multiplication): an average gain can hide one kind of
    problem collapsing."""
    rows = read_jsonl(WorldPaths(world_dir).file("eval_math"), ("level", "op"))
    kinds: dict[str, list[float]] = {}
    for row, score in zip(rows, scores, strict=True):
        kinds.setdefault(f"L{row['level']}{row['op']}", []).append(score)
    return {kind: statistics.fmean(values) for kind, values in sorted(kinds.items())}
