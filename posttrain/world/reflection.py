"""What R1-style cold-start data gets wrong, put in on purpose for the RL benches: redundant
self-checks on a worked solution (overthinking) and answers stated without the working.

A check recomputes the answer the other way round (a subtraction by adding back, a sum by taking
away) and changes nothing about the answer, so it is pure length: what a length reward (Kimi k1.5)
should learn to drop without costing accuracy (bench/rl_experiments.py, experiment `length_reward`).
Kept out of tasks.py on purpose: the world data does not change, only what cold-start SFT shows.
"""
from __future__ import annotations

import re

from posttrain.world.tasks import OP_SYMBOL, Language, compute, reasoning_steps

INVERSE = {"+": "-", "-": "+"}


def render_check(op: str, a: int, b: int, language: Language) -> str:
    """The check appended after a worked solution, ending on the answer again."""
    result = compute(op, a, b)
    if op in INVERSE:
        check_op, x, y, lands_on = INVERSE[op], result, b, a
    else:
        check_op, x, y, lands_on = op, a, b, result   # no division in the world: redo the product
    # Terse: each digit's arithmetic without the "write/carry" narration, so a check costs about
    # half a solution rather than a whole one.
    en_steps = [en.split(", write")[0] for en, _ in reasoning_steps(check_op, x, y) if not en.startswith("write")]
    zh_steps = [zh.split("，写")[0] for _, zh in reasoning_steps(check_op, x, y) if not zh.startswith("写")]
    head = f"{x}{OP_SYMBOL[check_op]}{y}"
    if language == "zh":
        return f"验算{head}：" + "，".join(zh_steps) + f"，得{lands_on}，所以{result}"
    return f"check {head}: " + ", ".join(en_steps) + f", back to {lands_on}, so {result}"


def with_check(reasoning: str, op: str, a: int, b: int, language: Language) -> str:
    separator = "；" if language == "zh" else "; "
    return reasoning + separator + render_check(op, a, b, language)


def answer_only(op: str, a: int, b: int, language: Language) -> str:
    """The reasoning of a solution that skips the digit-by-digit working and states the result:
    the same opening as a worked solution, so whether to work it out is one token's choice. The
    model is far less reliable this way (tasks.reasoning_steps): what RL should learn to stop
    doing, DeepSeek-R1's "thinking longer" on this world."""
    result = compute(op, a, b)
    if language == "zh":
        return f"{a}{OP_SYMBOL[op]}{b}：所以{result}"
    return f"{a}{OP_SYMBOL[op]}{b}: so {result}"


ANSWER_ONLY = re.compile(r"^\s*(?:<think>\s*)?\d+[" + re.escape("".join(OP_SYMBOL.values())) + r"]\d+(?:: so |：所以)")


def is_answer_only(response: str) -> bool:
    """Whether a response (or its reasoning) states the result without the working."""
    return ANSWER_ONLY.match(response) is not None
