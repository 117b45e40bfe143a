"""Exact comparison of two structured answer values: plain and percent scalars through the
canonical form, then the numeric screen, then the sympy worker; lists and sets order-free; tuples,
intervals and matrices element by element; equations up to sign; ratios up to proportion; the rule
that a plain-number gold takes only an answer written as a number (`NumeralRule`); and the hedge
check over several boxes."""
from __future__ import annotations

import re
from fractions import Fraction
from math import gcd

from posttrain.rewards.math.algebra import canonical_form
from posttrain.rewards.math.limits import (
    MAX_NODES, Deadline, TooExpensive, Undefined, Unparsable, Unsupported, tick,
)
from posttrain.rewards.math.normalise import normalise_text
from posttrain.rewards.math.numeric import count_nodes, numerically_different
from posttrain.rewards.math.parse import MINUS_ONE
from posttrain.rewards.math.values import Scalar, parse_value
from posttrain.rewards.math.worker import WORKER


def _scalar_equal_ast(a, b, deadline: Deadline, ca=None, cb=None) -> bool:
    """Exact equality of two scalar ASTs; raises TooExpensive / Timeout."""
    if a == b:
        return True
    err_a = err_b = None
    try:
        ca = canonical_form(a) if ca is None else ca
    except Undefined:
        return False
    except Unsupported as e:
        err_a = e
    try:
        cb = canonical_form(b) if cb is None else cb
    except Undefined:
        return False
    except Unsupported as e:
        err_b = e
    if err_a is None and err_b is None:
        return ca == cb
    if numerically_different(a, b):
        return False
    if count_nodes(a, MAX_NODES) > MAX_NODES or count_nodes(b, MAX_NODES) > MAX_NODES:
        raise TooExpensive("expression too large for the CAS")
    r = WORKER.equal(a, b, deadline)
    return bool(r)


_MINUS = ["n", -1, 1]
_TEN = ["n", 10, 1]


def _unsigned(ast) -> list:
    return ast[2] if ast[0] == "*" and len(ast) == 3 and ast[1] == _MINUS else ast


def _literal(ast) -> bool:
    return _unsigned(ast)[0] == "n"


def _fraction(ast) -> tuple[Fraction, Fraction] | None:
    """(numerator, denominator) of a fraction of two number literals (``\\frac{3}{4}``, ``-3/4``)."""
    if ast[0] == "*" and len(ast) == 3 and _literal(ast[1]) and ast[2][0] == "^" and ast[2][2] == _MINUS \
            and ast[2][1][0] == "n":
        num, den = _unsigned(ast[1]), ast[2][1]
        return Fraction(num[1], num[2]), Fraction(den[1], den[2])
    return None


def _integer_fraction(ast) -> bool:
    part = _fraction(_unsigned(ast))
    return part is not None and part[0].denominator == 1 and part[1].denominator == 1 and part[1] > 1


def _lowest_terms(num: Fraction, den: Fraction) -> bool:
    """Integers with no common factor, the denominator above 1 (``\\frac{216}{2}`` is a division to do)."""
    if num.denominator != 1 or den.denominator != 1 or den <= 1:
        return False
    return gcd(int(num), int(den)) == 1


def numeral(ast) -> bool:
    """A number written as a number, not as a computation: ``108``, ``-0.5``, ``1.08e2``, ``50\\%``,
    ``0.\\overline{3}``, a fraction in lowest terms (``\\frac{3}{4}``), a mixed number
    (``3\\frac{1}{2}``), scientific notation (``1.2 \\times 10^{3}``, ``10^{-3}``)."""
    ast = _unsigned(ast)
    if ast[0] == "n":
        return True
    if ast[0] == "^":   # 10^{-3}
        return ast[1] == _TEN and _literal(ast[2])
    if ast[0] == "+" and len(ast) == 3 and ast[1][0] == "n":   # a mixed number: whole + proper fraction
        part = _fraction(ast[2])
        return part is not None and 0 < part[0] < part[1] and _lowest_terms(*part)
    if ast[0] == "*" and len(ast) == 3 and ast[1][0] == "n" and ast[2][0] == "^" and ast[2][1] == _TEN:
        return _literal(ast[2][2])   # scientific notation
    part = _fraction(ast)
    return part is not None and _lowest_terms(*part)


def plain_number(ast) -> bool:
    """A gold written as a number: a `numeral`, or a fraction of two integers left unreduced."""
    return numeral(ast) or _integer_fraction(ast)


class NumeralRule:
    """Where the gold is a plain number, the answer must be written as one too: an expression of the
    right value (``71 + 37``, ``2^{10}``, ``108 \\cdot 1``, ``\\frac{216}{2}`` for 108) is the work
    left undone, and any number of ways to write it exist, so no list of patterns could close it.
    A gold fraction left unreduced (``\\frac{2}{4}``) takes any fraction of two integers as well.
    `refused` counts the refused pairs whose value was right (the verdict's ``unevaluated``)."""

    __slots__ = ("refused",)

    def __init__(self) -> None:
        self.refused = 0

    def allows(self, answer: Scalar, gold: Scalar, deadline: Deadline) -> bool:
        if not plain_number(gold.ast) or numeral(answer.ast):
            return True
        if not numeral(gold.ast) and _integer_fraction(answer.ast):
            return True
        if _scalar_equal(answer, gold, deadline):
            self.refused += 1
        return False


def _scalar_equal(x: Scalar, y: Scalar, deadline: Deadline, rule: NumeralRule | None = None) -> bool:
    """Answer x against gold y.  A percent compares as the number before its sign (``50\\%`` is
    never 0.5): with a rule (an answer against its gold) a percent answer needs a percent gold,
    while a percent gold takes its number with the sign left off."""
    if rule is not None and ((x.pct and not y.pct) or not rule.allows(x, y, deadline)):
        return False

    def canon_or_none(s: Scalar):
        try:
            return s.canon()
        except (Unsupported, Undefined):
            return None

    return _scalar_equal_ast(x.ast, y.ast, deadline, canon_or_none(x), canon_or_none(y))


def _unordered_equal(xs: list, ys: list, deadline: Deadline, rule: NumeralRule | None) -> bool:
    # sets: every element of one matches an element of the other (duplicates collapse)
    for a in xs:
        if not any(values_equal(a, b, deadline, rule) for b in ys):
            return False
    for b in ys:
        if not any(values_equal(a, b, deadline, rule) for a in xs):
            return False
    return True


def values_equal(a: tuple, g: tuple, deadline: Deadline, rule: NumeralRule | None = None) -> bool:
    """Answer value a against gold value g; ``rule``: the answer's numbers must be numerals where
    the gold's are (`NumeralRule`), off where two answers are compared (hedges, equation chains)."""
    tick()
    ka, kg = a[0], g[0]
    if ka == "scalar" and kg == "scalar":
        return _scalar_equal(a[1], g[1], deadline, rule)
    if ka == "text" or kg == "text":
        if ka == kg:
            return a[1] == g[1]
        other = g if ka == "text" else a
        if other[0] == "scalar":
            return normalise_text(other[1].text) == (a[1] if ka == "text" else g[1])
        return False
    if ka in ("list", "set") and kg in ("list", "set"):
        return _unordered_equal(a[1], g[1], deadline, rule)
    if ka == "set" and len(a[1]) == 1 and kg not in ("seq", "union", "matrix"):
        return values_equal(a[1][0], g, deadline, rule)
    if kg == "set" and len(g[1]) == 1 and ka not in ("seq", "union", "matrix"):
        return values_equal(a, g[1][0], deadline, rule)
    if ka == "seq" and kg == "seq":
        return (a[1], a[2]) == (g[1], g[2]) and len(a[3]) == len(g[3]) and all(
            values_equal(x, y, deadline, rule) for x, y in zip(a[3], g[3])
        )
    if {ka, kg} == {"list", "seq"}:
        lst, seq = (a, g) if ka == "list" else (g, a)
        if (seq[1], seq[2]) != ("(", ")") or len(lst[1]) != len(seq[3]):
            return False
        pairs = zip(a[1], g[3]) if ka == "list" else zip(a[3], g[1])
        return all(values_equal(x, y, deadline, rule) for x, y in pairs)
    if ka == "union" and kg == "union":
        return _unordered_equal(a[1], g[1], deadline, rule)
    if ka == "matrix" and kg == "matrix":
        return len(a[1]) == len(g[1]) and all(
            len(r1) == len(r2) and all(values_equal(x, y, deadline, rule) for x, y in zip(r1, r2))
            for r1, r2 in zip(a[1], g[1])
        )
    if {ka, kg} == {"matrix", "seq"}:
        mat, seq = (a, g) if ka == "matrix" else (g, a)
        flat = [c for r in mat[1] for c in r]
        if (len(mat[1]) == 1 or all(len(r) == 1 for r in mat[1])) and (seq[1], seq[2]) == ("(", ")"):
            pairs = zip(flat, seq[3]) if ka == "matrix" else zip(seq[3], flat)
            return len(flat) == len(seq[3]) and all(values_equal(x, y, deadline, rule) for x, y in pairs)
        return False
    if ka == "eq" and kg == "eq":
        x, y = a[1], g[1]
        if _scalar_equal(x, y, deadline):
            return True
        neg = Scalar(["*", MINUS_ONE, y.ast])
        return _scalar_equal(x, neg, deadline)
    if ka == "ratio" and kg == "ratio":
        if rule is not None and not all(rule.allows(x, y, deadline) for x, y in zip(a[1], g[1])):
            return False
        (a1, a2), (g1, g2) = a[1], g[1]
        if _scalar_equal(a1, g1, deadline) and _scalar_equal(a2, g2, deadline):
            return True
        # proportional: a1 * g2 == a2 * g1 (both sides nonzero)
        return _scalar_equal(Scalar(["*", a1.ast, g2.ast]), Scalar(["*", a2.ast, g1.ast]), deadline) and not (
            _scalar_equal(a2, Scalar(["n", 0, 1]), deadline) or _scalar_equal(g2, Scalar(["n", 0, 1]), deadline)
        )
    if ka == "rel" and kg == "rel":
        return a[1] == g[1] and len(a[2]) == len(g[2]) and all(
            _scalar_equal(x, y, deadline, rule) for x, y in zip(a[2], g[2])
        )
    return False


def is_hedged(boxes: list, thousands: bool, deadline: Deadline) -> bool:
    last = boxes[-1]
    seen = {re.sub(r"\s+", "", last)}  # a box repeated verbatim is compared once
    last_val = None
    for other in boxes[:-1]:
        if other is None:
            continue
        norm = re.sub(r"\s+", "", other)
        if norm in seen:
            continue
        seen.add(norm)
        try:
            if last_val is None:
                last_val = parse_value(last, thousands)
            if not values_equal(parse_value(other, thousands), last_val, deadline):
                return True
        except (Unparsable, TooExpensive, Unsupported, Undefined):
            return True
    return False
