"""The `equation` constraint: the reply states its result as an arithmetic equation, and every
equation it states is true.

An equation is two or more expressions joined by `=` (`12 + 34 = 46`, `46 = 34 + 12`), each
expression numbers (integers or decimals) joined by `+ - × * x ÷ /` with the usual precedence, at least one operator
somewhere in the chain. It is evaluated exactly (fractions, no `eval`); a division by zero makes it
false. One false equation fails the reply, so a hedge that states the true relation beside a false one
("12 + 34 = 46, 12 + 46 = 34") is not paid; stating none fails too. Whether the equation is about the
task's numbers is the reference-answer guard's business (`instruction_guard`): the answer must be
stated and every other number must come from the prompt.
"""
from __future__ import annotations

import re
import unicodedata
from fractions import Fraction

_NUMBER = r"-?\d{1,30}(?:\.\d{1,30})?"
_OPERATOR = r"[-+×x*/÷]"
_SIDE = rf"{_NUMBER}(?:\s*{_OPERATOR}\s*{_NUMBER}){{0,20}}"
_EQUATION = re.compile(rf"(?<!\d)(?<!\d\.){_SIDE}(?:\s*=\s*{_SIDE})+(?!\d|\.\d)")
_TOKEN = re.compile(rf"\d+(?:\.\d+)?|{_OPERATOR}")


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).replace("−", "-").replace("–", "-")


def _value(side: str) -> Fraction | None:
    """The exact value of `a op b op c ...` with × and ÷ binding tighter than + and -."""
    items: list = []
    negative = False
    for token in _TOKEN.findall(side):
        expect_number = not items or not isinstance(items[-1], Fraction)
        if expect_number and token == "-":
            negative = not negative
        elif expect_number != token[0].isdigit():
            return None
        elif expect_number:
            items.append(-Fraction(token) if negative else Fraction(token))
            negative = False
        else:
            items.append(token)
    if not items or not isinstance(items[-1], Fraction):
        return None
    total, sign, term = Fraction(0), 1, items[0]
    for op, number in zip(items[1::2], items[2::2]):
        if op in "×x*":
            term *= number
        elif op in "/÷":
            if number == 0:
                return None
            term /= number
        else:
            total, sign, term = total + sign * term, (1 if op == "+" else -1), number
    return total + sign * term


def equations(text: str) -> list[tuple[str, bool]]:
    """Each equation the text states, with whether it holds."""
    found = []
    for match in _EQUATION.finditer(_normalise(text)):
        sides = [s.strip() for s in match.group(0).split("=")]
        if not any(re.search(r"\d\s*" + _OPERATOR, s) for s in sides):
            continue
        values = [_value(s) for s in sides]
        found.append((match.group(0), None not in values and len(set(values)) == 1))
    return found


def check_equation(answer: str, constraint: dict) -> bool:
    stated = equations(answer)
    return bool(stated) and all(holds for _, holds in stated)
