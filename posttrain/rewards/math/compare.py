"""Exact comparison of two structured answer values: plain and percent scalars through the
canonical form, then the numeric screen, then the sympy worker; lists and sets order-free; tuples,
intervals and matrices element by element; equations up to sign; ratios up to proportion; and the
hedge check over several boxes."""
from __future__ import annotations

import re
from fractions import Fraction

from posttrain.rewards.math.algebra import canonical_form, poly_const, poly_mul
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


def _scalar_equal(x: Scalar, y: Scalar, deadline: Deadline) -> bool:
    def canon_or_none(s: Scalar):
        try:
            return s.canon()
        except (Unsupported, Undefined):
            return None

    ca, cb = canon_or_none(x), canon_or_none(y)
    if _scalar_equal_ast(x.ast, y.ast, deadline, ca, cb):
        return True
    if x.pct != y.pct:
        # 50% = 50 and 50% = 0.5
        p, q = (x, y) if x.pct else (y, x)
        cp, cq = (ca, cb) if x.pct else (cb, ca)
        cs = poly_mul(cp, poly_const(Fraction(1, 100))) if cp is not None else None
        return _scalar_equal_ast(["*", p.ast, ["n", 1, 100]], q.ast, deadline, cs, cq)
    return False


def _unordered_equal(xs: list, ys: list, deadline: Deadline) -> bool:
    # sets: every element of one matches an element of the other (duplicates collapse)
    for a in xs:
        if not any(values_equal(a, b, deadline) for b in ys):
            return False
    for b in ys:
        if not any(values_equal(a, b, deadline) for a in xs):
            return False
    return True


def values_equal(a: tuple, g: tuple, deadline: Deadline) -> bool:
    tick()
    ka, kg = a[0], g[0]
    if ka == "scalar" and kg == "scalar":
        return _scalar_equal(a[1], g[1], deadline)
    if ka == "text" or kg == "text":
        if ka == kg:
            return a[1] == g[1]
        other = g if ka == "text" else a
        if other[0] == "scalar":
            return normalise_text(other[1].text) == (a[1] if ka == "text" else g[1])
        return False
    if ka in ("list", "set") and kg in ("list", "set"):
        return _unordered_equal(a[1], g[1], deadline)
    if ka == "set" and len(a[1]) == 1 and kg not in ("seq", "union", "matrix"):
        return values_equal(a[1][0], g, deadline)
    if kg == "set" and len(g[1]) == 1 and ka not in ("seq", "union", "matrix"):
        return values_equal(a, g[1][0], deadline)
    if ka == "seq" and kg == "seq":
        return (a[1], a[2]) == (g[1], g[2]) and len(a[3]) == len(g[3]) and all(
            values_equal(x, y, deadline) for x, y in zip(a[3], g[3])
        )
    if {ka, kg} == {"list", "seq"}:
        lst, seq = (a, g) if ka == "list" else (g, a)
        if (seq[1], seq[2]) != ("(", ")") or len(lst[1]) != len(seq[3]):
            return False
        pairs = zip(a[1], g[3]) if ka == "list" else zip(a[3], g[1])
        return all(values_equal(x, y, deadline) for x, y in pairs)
    if ka == "union" and kg == "union":
        return _unordered_equal(a[1], g[1], deadline)
    if ka == "matrix" and kg == "matrix":
        return len(a[1]) == len(g[1]) and all(
            len(r1) == len(r2) and all(values_equal(x, y, deadline) for x, y in zip(r1, r2))
            for r1, r2 in zip(a[1], g[1])
        )
    if {ka, kg} == {"matrix", "seq"}:
        mat, seq = (a, g) if ka == "matrix" else (g, a)
        flat = [c for r in mat[1] for c in r]
        if (len(mat[1]) == 1 or all(len(r) == 1 for r in mat[1])) and (seq[1], seq[2]) == ("(", ")"):
            return len(flat) == len(seq[3]) and all(values_equal(x, y, deadline) for x, y in zip(flat, seq[3]))
        return False
    if ka == "eq" and kg == "eq":
        x, y = a[1], g[1]
        if _scalar_equal(x, y, deadline):
            return True
        neg = Scalar(["*", MINUS_ONE, y.ast])
        return _scalar_equal(x, neg, deadline)
    if ka == "ratio" and kg == "ratio":
        (a1, a2), (g1, g2) = a[1], g[1]
        if _scalar_equal(a1, g1, deadline) and _scalar_equal(a2, g2, deadline):
            return True
        # proportional: a1 * g2 == a2 * g1 (both sides nonzero)
        return _scalar_equal(Scalar(["*", a1.ast, g2.ast]), Scalar(["*", a2.ast, g1.ast]), deadline) and not (
            _scalar_equal(a2, Scalar(["n", 0, 1]), deadline) or _scalar_equal(g2, Scalar(["n", 0, 1]), deadline)
        )
    if ka == "rel" and kg == "rel":
        return a[1] == g[1] and len(a[2]) == len(g[2]) and all(
            _scalar_equal(x, y, deadline) for x, y in zip(a[2], g[2])
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
