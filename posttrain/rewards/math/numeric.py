"""Numeric screen: evaluates two ASTs in floating point (symbols at fixed pseudo-random points) to
prove inequality cheaply before sympy is asked; closeness proves nothing."""
from __future__ import annotations

import cmath
import math
import zlib


def _sym_value(name: str) -> float:
    """A fixed pseudo-random point in [0.31, 1.68) for a symbol, the same in every process."""
    h = zlib.crc32(name.encode())
    return 0.31 + (h % 100_003) / 100_003.0 * 1.37


def _num(ast) -> complex:
    op = ast[0]
    if op == "n":
        return complex(ast[1] / ast[2])
    if op == "s":
        return complex(_sym_value(ast[1]))
    if op == "c":
        v = {"pi": math.pi, "E": math.e, "I": 1j}.get(ast[1])
        if v is None:
            raise OverflowError("infinity")
        return complex(v)
    if op == "+":
        return sum((_num(a) for a in ast[1:]), 0j)
    if op == "*":
        r = 1 + 0j
        for a in ast[1:]:
            r *= _num(a)
        return r
    if op == "^":
        b, e = _num(ast[1]), _num(ast[2])
        if abs(e) > 1e4:
            raise OverflowError
        if e.imag == 0 and e.real == int(e.real):
            return b ** int(e.real)
        if b.imag == 0 and b.real < 0 and ast[2][0] == "n" and ast[2][2] % 2 == 1:
            return -((-b.real) ** e.real) * (1 if ast[2][1] % 2 else -1)
        return b**e
    if op == "root":
        x, n = _num(ast[1]), _num(ast[2])
        if x.imag == 0 and x.real < 0 and n.real % 2 == 1:
            return complex(-((-x.real) ** (1 / n.real)))
        return x ** (1 / n)
    if op == "!":
        x = _num(ast[1])
        if abs(x) > 170:
            raise OverflowError
        return complex(math.gamma(x.real + 1))
    if op == "binom":
        n, k = _num(ast[1]).real, _num(ast[2]).real
        if abs(n) > 170:
            raise OverflowError
        return complex(math.gamma(n + 1) / (math.gamma(k + 1) * math.gamma(n - k + 1)))
    if op == "abs":
        return complex(abs(_num(ast[1])))
    if op == "log":
        return cmath.log(_num(ast[1])) / cmath.log(_num(ast[2]))
    if op == "f":
        x = _num(ast[2])
        f = ast[1]
        if f == "sec":
            return 1 / cmath.cos(x)
        if f == "csc":
            return 1 / cmath.sin(x)
        if f == "cot":
            return 1 / cmath.tan(x)
        if f == "arccot":
            return cmath.atan(1 / x)
        if f in ("floor", "ceil"):
            raise ValueError("discontinuous")
        fn = {"sin": cmath.sin, "cos": cmath.cos, "tan": cmath.tan, "arcsin": cmath.asin,
              "arccos": cmath.acos, "arctan": cmath.atan, "sinh": cmath.sinh, "cosh": cmath.cosh,
              "tanh": cmath.tanh, "ln": cmath.log, "log": cmath.log, "exp": cmath.exp}[f]
        return fn(x)
    raise ValueError(op)  # pragma: no cover


def numerically_different(a, b) -> bool:
    """True only when floating-point values prove the two ASTs differ."""
    try:
        x, y = _num(a), _num(b)
    except (ArithmeticError, ValueError, TypeError, KeyError, RecursionError):
        return False
    if not all(math.isfinite(v) for v in (x.real, x.imag, y.real, y.imag)):
        return False
    scale = max(1.0, abs(x), abs(y))
    return abs(x - y) > 1e-6 * scale


def count_nodes(ast, limit: int) -> int:
    """The number of nodes of an AST, counted no further than just past ``limit``."""
    count = 0
    stack = [ast]
    while stack:
        node = stack.pop()
        count += 1
        if count > limit:
            return count
        if isinstance(node, list) and node and node[0] not in ("n", "s", "c"):
            stack.extend(x for x in node[1:] if isinstance(x, list))
    return count
