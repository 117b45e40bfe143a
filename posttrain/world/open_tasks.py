"""The embedded world's open-ended kind: "state the sum of a and b as an equation".

Its demonstrations are sloppy, as scraped SFT data is: after a correct worked sum, half of them
write the equation with the result and the second operand swapped (`12 + 46 = 34`). Preference
pairs then say which of two replies is right: the chosen reply `a + b = c`, the rejected one the
same reply with `b` and `c` swapped. The two sides have the same length and the same characters
(the world's tokenizer is character-level), so neither a length nor a bag-of-tokens model can tell
them apart; only the order of the numbers, which no rule reward of the chain reads, does. Evaluation
checks the reply independently of any model: the `equation` constraint (every stated equation true)
plus the reference-answer guard (the sum stated, no number from outside the prompt).

Operands use the math generator's held-out partition (`tasks.is_held_out` on `a+b`), and every text
uses only characters the world's tokenizer already has, so the base models do not change.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Iterable

from posttrain.chat import assemble_response
from posttrain.world.tasks import LEVELS, Language, Split, _split_ok, render_reasoning

PHRASES: dict[str, tuple[list[str], list[str]]] = {
    # language -> (training phrasings, held-out phrasings)
    "en": (["State the sum of {a} and {b} as an equation.", "Write {a} plus {b} as an equation.",
            "Give an equation for the sum of {a} and {b}."],
           ["Express the sum of {a} and {b} as an equation."]),
    "zh": (["请把 {a} + {b} 写成等式。", "用等式写出 {a} + {b}。"],
           ["请用等式算出 {a} + {b}。"]),
}
CONSTRAINTS = [{"type": "equation"}]


@dataclass(frozen=True)
class EquationTask:
    id: str
    language: Language
    a: int
    b: int
    question: str
    reasoning: str

    @property
    def answer(self) -> str:
        return str(self.a + self.b)

    @property
    def true_equation(self) -> str:
        return f"{self.a} + {self.b} = {self.a + self.b}"

    @property
    def swapped_equation(self) -> str:
        """The same characters with the result and the second operand swapped: false for b > 0."""
        return f"{self.a} + {self.a + self.b} = {self.b}"

    def reply(self, equation: str) -> str:
        return assemble_response(self.reasoning, equation)


def equation_tasks(n: int, seed: int, split: Split, levels: Iterable[int] = (1, 2),
                   languages: Iterable[Language] = ("en", "zh")) -> list[EquationTask]:
    """`n` distinct tasks (operands, language) of the addition problems of `levels`."""
    rng = random.Random(f"open/{seed}/{split}")
    languages = list(languages)
    ranges = [(ra, rb) for level in levels for op, ra, rb in LEVELS[level] if op == "+"]
    tasks: list[EquationTask] = []
    seen: set[tuple[int, int, str]] = set()
    for _ in range(n * 200):
        if len(tasks) == n:
            return tasks
        language = languages[len(tasks) % len(languages)]
        ra, rb = rng.choice(ranges)
        a, b = rng.randint(*ra), rng.randint(*rb)
        if not _split_ok(f"{a}+{b}", split) or (a, b, language) in seen:
            continue
        seen.add((a, b, language))
        train_phrases, eval_phrases = PHRASES[language]
        question = rng.choice(eval_phrases if split == "eval" else train_phrases).format(a=a, b=b)
        tasks.append(EquationTask(f"open-{split}-{seed}-{len(tasks)}", language, a, b, question,
                                  render_reasoning("+", a, b, language)))
    raise RuntimeError(f"could not draw {n} distinct {split} equation tasks; widen the levels")


def prompt_row(task: EquationTask) -> dict:
    """A prompt row of kind `open`: training pays a reward model, evaluation checks the equation."""
    return {"prompt": task.question, "kind": "open", "answer": task.answer, "constraints": CONSTRAINTS,
            "language": task.language, "thinking": True, "id": task.id}


def demonstration_row(task: EquationTask, rng: random.Random) -> dict:
    """An SFT row whose equation is right with probability one half."""
    equation = task.true_equation if rng.random() < 0.5 else task.swapped_equation
    return {"messages": [{"role": "user", "content": task.question},
                         {"role": "assistant", "content": task.reply(equation)}],
            "thinking": True, "language": task.language, "id": task.id}


def preference_row(task: EquationTask) -> dict:
    """A pair in TRL's conversational preference format: the true equation chosen."""
    return {"prompt": [{"role": "user", "content": task.question}],
            "chosen": [{"role": "assistant", "content": task.reply(task.true_equation)}],
            "rejected": [{"role": "assistant", "content": task.reply(task.swapped_equation)}],
            "language": task.language, "id": task.id}


# The world's judge (Qwen3 sec. 4.4's model-based reward with a reference answer), trained by
# bench/world_judge.py. Its template is short because the world's models read 512 characters.
# the justification and the rating: `Stated: 1011, 18. Reference: 1011. Digits: 1:1= 0:0= 1:1= 1:1=; 1:1= 8:0! _:1! _:1!. [[0]]`
JUDGE_MAX_NEW_TOKENS = 112
JUDGE_TEMPLATE = ("Rate the response against the reference answer: [[10]] right, [[0]] wrong.\n"
                  "Question: {question}\nReference answer: {reference}\nResponse: {response}\n")


def judged_answers(task: EquationTask, rng: random.Random, training: bool = False) -> list[str]:
    """Answers a judge meets, half of them right by the world's checker: the true equation in three
    orders; the swapped one, a wrong result, the bare result, and a hedge of true and swapped. To
    evaluate, one right and one wrong answer; to train, two right ones, a wrong result (the slip a
    judge misses: off by a digit, judged by the numbers alone) and one of the other wrong answers."""
    a, b, c = task.a, task.b, task.a + task.b
    off = c + rng.choice([d for d in (-10, -2, -1, 1, 2, 10) if c + d >= 0])
    right = [task.true_equation, f"{b} + {a} = {c}", f"{c} = {a} + {b}"]
    wrong = [task.swapped_equation, f"{a} + {b} = {off}", str(c), f"{task.true_equation}, {task.swapped_equation}"]
    if training:
        return rng.sample(right, 2) + [wrong[1], rng.choice(wrong[:1] + wrong[2:])]
    return [rng.choice(right), rng.choice(wrong)]


_EQUATION = re.compile(r"(\d+(?:\s*\+\s*\d+)?)\s*=\s*(\d+(?:\s*\+\s*\d+)?)")


def judge_rationale(answer: str, reference: str) -> str:
    """The judge's one-sentence justification before its rating (as DEFAULT_TEMPLATE asks): the sums
    the answer states beside the reference, then each stated sum against the reference digit by
    digit from the left, both digits before their verdict (`9:9= 9:9= 7:6!`, `_` past a number's
    end). Two numbers side by side are not enough for a 1.0M judge: it copies both right and still
    rates `Stated: 68. Reference: 70.` right; with the verdict between the digits (`7=7`) it decides
    blind and copies the digit the verdict implies (world_judge.md)."""
    stated = [side for m in _EQUATION.finditer(answer) for side in m.groups() if "+" not in side]
    if not stated:
        return f"Stated: no equation. Reference: {reference}."
    def pairs(number: str) -> str:
        width = max(len(number), len(reference))
        return " ".join(f"{s}:{r}{'=' if s == r else '!'}" for s, r in zip(number.ljust(width, "_"), reference.ljust(width, "_")))

    digits = "; ".join(pairs(number) for number in stated)
    return f"Stated: {', '.join(stated)}. Reference: {reference}. Digits: {digits}."


def judge_rows(tasks: list[EquationTask], seed: int, training: bool = False) -> list[dict]:
    """SFT rows for the judge: the judge prompt (question, reference, the answer after the reply's
    thinking) -> a justification (`judge_rationale`) and the world checker's verdict on the whole
    reply, `[[10]]` or `[[0]]`."""
    from posttrain.rewards import verify_row
    from posttrain.rewards.judge import judge_prompt

    rng = random.Random(f"judge/{seed}")
    rows = []
    for task in tasks:
        for answer in judged_answers(task, rng, training):
            score, _ = verify_row(task.reply(answer), prompt_row(task))
            rows.append({"messages": [{"role": "user", "content": judge_prompt(JUDGE_TEMPLATE, task.question, task.answer, answer)},
                                      {"role": "assistant", "content": f"<think>\n\n</think>\n\n{judge_rationale(answer, task.answer)} "
                                                                   f"[[{10 if score == 1.0 else 0}]]"}],
                         "thinking": False, "id": f"judge-{task.id}-{len(rows)}", "verdict": score,
                         "judged": {"question": task.question, "reference": task.answer, "response": answer}})
    return rows
