"""Held-out math problems asked the way training asks them.

The held-out suite differs from training twice over: its operands come from a partition training
never draws from, and its phrasings are templates training never uses. Asking the same held-out
problems with training templates separates the two: a gain that shows here and not on the suite is
a gain on unseen problems that does not carry over to unseen phrasings
(bench/rl_experiments.py reports both). Kept out of tasks.py on purpose: the world data does not
change.
"""
from __future__ import annotations

import random

from posttrain.world.tasks import OP_SYMBOL, TEMPLATES, _fill


def problem_kind(row: dict) -> str:
    """"bare" (the operation written out, "Evaluate 12 + 7.") or "word" (a story problem): only
    bare templates write the operator between the operands."""
    return "bare" if f"{row['a']} {OP_SYMBOL[row['op']]} {row['b']}" in row["question"] else "word"


def with_training_phrasing(rows: list[dict], seed: int = 0) -> list[str]:
    """Each problem (a held-out row with language, op, a, b, question) re-asked with a training
    template of the same language, kind and operation; same operands, same answer."""
    rng = random.Random(f"training-phrasing/{seed}")
    questions = []
    for row in rows:
        kind = problem_kind(row)
        train_variants, _ = TEMPLATES[(row["language"], kind, "any" if kind == "bare" else row["op"])]
        questions.append(_fill(rng.choice(train_variants), row["language"], row["op"], row["a"], row["b"], rng))
    return questions
