"""Pretraining corpus: arithmetic with worked solutions and short facts, in English and Chinese.

Deliberately NOT the chat format: no ChatML turns, no think block, no \\boxed{}; the cold-start stage
has to teach those. A share of the Chinese solutions carries English steps (and a smaller share of
English solutions Chinese steps) so the language-consistency reward has something to fix.
"""
from __future__ import annotations

import random

from posttrain.config.embedded import CorpusConfig  # noqa: F401 (re-exported)
from posttrain.world import tasks

HEADERS = ["Question: ", "Solution: ", "Answer: ", "问题：", "解答：", "答案："]


def math_document(p: tasks.MathProblem) -> str:
    if p.language == "zh":
        return f"问题：{p.question}\n解答：{p.reasoning}\n答案：{p.answer}"
    return f"Question: {p.question}\nSolution: {p.reasoning}\nAnswer: {p.answer}"


def direct_document(d: tasks.DirectTask) -> str:
    if d.language == "zh":
        return f"问题：{d.question}\n答案：{d.answer}"
    return f"Question: {d.question}\nAnswer: {d.answer}"


def document_question(document: str) -> str:
    """The question a corpus document starts with (for the train/eval overlap check)."""
    return document.split("\n", 1)[0].removeprefix("Question: ").removeprefix("问题：")


def raw_prompt(question: str, language: str) -> str:
    """Prompt in corpus format, used to probe what the base model knows before any chat training."""
    return f"问题：{question}\n解答：" if language == "zh" else f"Question: {question}\nSolution: "


def build_corpus(cfg: CorpusConfig, seed: int) -> list[str]:
    rng = random.Random(f"corpus/{seed}")
    clean = tasks.math_problems(cfg.math_documents, seed, "train", levels=cfg.levels, word_share=cfg.word_share)
    docs = []
    for p in clean:
        if p.language == "zh" and rng.random() < cfg.mixed_language_share:
            p.reasoning = tasks.render_reasoning(p.op, p.a, p.b, "zh", cfg.mixed_step_share, rng)
        elif p.language == "en" and rng.random() < cfg.mixed_language_share / 3:
            p.reasoning = tasks.render_reasoning(p.op, p.a, p.b, "en", cfg.mixed_step_share, rng)
        docs.append(math_document(p))
    docs += [direct_document(d) for d in tasks.direct_tasks(cfg.direct_documents, seed, "train")]
    rng.shuffle(docs)
    return docs
