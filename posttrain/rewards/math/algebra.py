"""Exact algebra without sympy: a canonical form of an expression as a polynomial over Q in
symbols, pi, e, i and real radicals of rationals.  Products of prime powers with fractional
exponents are linearly independent over Q, so two expressions are equal exactly when their forms
are; what the form cannot express raises Unsupported (left to the numeric screen and sympy)."""
from __future__ import annotations

import math
from fractions import Fraction

from posttrain.rewards.math.limits import (
    MAX_BITS, MAX_EXPONENT, MAX_FACTORIAL, MAX_POLY_POWER, MAX_TERMS, TooExpensive, Undefined, Unsupported, tick,
)

# A polynomial over Q in atoms: poly = {monomial key: Fraction}; key = sorted tuple
# of (atom, exponent).  Atoms: ("p", prime) radical part of a prime, exponent in (0, 1);
# ("s", name) symbol; ("c", "pi"|"E"|"oo") constants; ("c", "I") imaginary unit, exponent 1.


def _check_bits(x: Fraction) -> Fraction:
    if x.numerator.bit_length() > MAX_BITS or x.denominator.bit_length() > MAX_BITS:
        raise TooExpensive("number too large")
    return x


def _norm_mono(exps: dict) -> tuple[Fraction, tuple]:
    coef = Fraction(1)
    items = []
    for atom, e in exps.items():
        if e == 0:
            continue
        if atom[0] == "p":
            fl = math.floor(e)
            if fl:
                coef *= Fraction(atom[1]) ** fl
                e -= fl
            if e == 0:
                continue
        elif atom == ("c", "I"):
            if e.denominator != 1:
                raise Unsupported("fractional power of i")
            k = int(e) % 4
            if k >= 2:
                coef = -coef
                k -= 2
            if k == 0:
                continue
            e = Fraction(1)
        items.append((atom, e))
    items.sort()
    return coef, tuple(items)


def poly_const(v: Fraction) -> dict:
    """The constant polynomial v."""
    return {(): v} if v != 0 else {}


def _padd(a: dict, b: dict) -> dict:
    r = dict(a)
    for k, v in b.items():
        nv = r.get(k, 0) + v
        if nv == 0:
            r.pop(k, None)
        else:
            r[k] = _check_bits(nv)
    return r


def poly_mul(a: dict, b: dict) -> dict:
    """The product of two polynomials (TooExpensive past MAX_TERMS terms)."""
    if len(a) * len(b) > MAX_TERMS:
        raise TooExpensive("polynomial too large")
    r: dict = {}
    for ka, ca in a.items():
        tick()
        for kb, cb in b.items():
            if not ka:
                coef, key = Fraction(1), kb
            elif not kb:
                coef, key = Fraction(1), ka
            else:
                exps: dict = dict(ka)
                for atom, e in kb:
                    exps[atom] = exps.get(atom, 0) + e
                coef, key = _norm_mono(exps)
            v = r.get(key, 0) + _check_bits(ca * cb * coef)
            if v == 0:
                r.pop(key, None)
            else:
                r[key] = v
    if len(r) > MAX_TERMS:
        raise TooExpensive("polynomial too large")
    return r


def _as_const(p: dict) -> Fraction | None:
    if not p:
        return Fraction(0)
    if len(p) == 1 and () in p:
        return p[()]
    return None


_SMALL_PRIMES = [p for p in range(2, 1000) if all(p % q for q in range(2, int(p**0.5) + 1))]


def _is_probable_prime(n: int) -> bool:
    if n < 2:
        return False
    for p in _SMALL_PRIMES[:12]:
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d //= 2
        s += 1
    for a in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):  # deterministic below 3.3e24
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = pow(x, 2, n)
            if x == n - 1:
                break
        else:
            return False
    return True


def _factor(n: int) -> dict[int, int]:
    if n.bit_length() > 80:
        raise Unsupported("number too large to factor")
    f: dict[int, int] = {}
    for p in _SMALL_PRIMES:
        if p * p > n:
            break
        while n % p == 0:
            f[p] = f.get(p, 0) + 1
            n //= p
    if n > 1:
        if n < 1_000_000 or _is_probable_prime(n):
            f[n] = f.get(n, 0) + 1
        else:
            # perfect power of a big prime?
            for k in range(2, 6):
                r = round(n ** (1.0 / k))
                for c in (r - 1, r, r + 1):
                    if c > 1 and c**k == n and _is_probable_prime(c):
                        f[c] = f.get(c, 0) + k
                        return f
            raise Unsupported("cannot factor")
    return f


def _ppow(base: dict, e: Fraction) -> dict:
    if e.denominator == 1:
        n = int(e)
        c = _as_const(base)
        if c is not None:
            if c == 0:
                if n < 0:
                    raise Undefined("division by zero")
                return {} if n > 0 else poly_const(Fraction(1))
            if abs(n) > MAX_EXPONENT and abs(c) != 1:
                raise TooExpensive("exponent too large")
            if max(c.numerator.bit_length(), c.denominator.bit_length()) * abs(n) > MAX_BITS:
                raise TooExpensive("power too large")
            return poly_const(c**n)
        if len(base) == 1:
            (key, coef), = base.items()
            if coef.numerator.bit_length() * abs(n) > MAX_BITS or coef.denominator.bit_length() * abs(n) > MAX_BITS:
                raise TooExpensive("power too large")
            if abs(n) > MAX_EXPONENT:
                raise TooExpensive("exponent too large")
            mc, mk = _norm_mono({a: x * n for a, x in key})
            return {mk: _check_bits(coef**n * mc)}
        if n < 0:
            raise Unsupported("negative power of a sum")
        if n > MAX_POLY_POWER:
            raise TooExpensive("power of a sum too large")
        result = poly_const(Fraction(1))
        sq = base
        while n:
            if n & 1:
                result = poly_mul(result, sq)
            n >>= 1
            if n:
                sq = poly_mul(sq, sq)
        return result
    # fractional exponent: only a monomial with a rational coefficient and pi/e/radical atoms
    if len(base) != 1:
        if not base:
            if e > 0:
                return {}
            raise Undefined("zero to a non-positive power")
        raise Unsupported("fractional power of a sum")
    (key, coef), = base.items()
    if any(a[0] == "s" or a == ("c", "I") or a == ("c", "oo") for a, _ in key):
        raise Unsupported("fractional power of a symbol")
    if abs(e.numerator) > 1000 or e.denominator > 1000:
        raise TooExpensive("exponent too large")
    sign = 1
    if coef < 0:
        if e.denominator % 2 == 0:
            raise Unsupported("even root of a negative number")
        coef = -coef
        sign = -1 if e.numerator % 2 else 1
    exps: dict = {a: x * e for a, x in key}
    for p, k in _factor(coef.numerator).items():
        exps[("p", p)] = exps.get(("p", p), 0) + k * e
    for p, k in _factor(coef.denominator).items():
        exps[("p", p)] = exps.get(("p", p), 0) - k * e
    for a, x in exps.items():
        if a[0] == "p" and abs(x) * a[1].bit_length() > MAX_BITS:
            raise TooExpensive("power too large")
    mc, mk = _norm_mono(exps)
    return {mk: _check_bits(mc * sign)}


def canonical_form(ast) -> dict:
    """The polynomial of an AST; Unsupported where it has none (functions, symbolic exponents, ...),
    Undefined where the expression has no value (division by zero)."""
    tick()
    op = ast[0]
    if op == "n":
        return poly_const(Fraction(ast[1], ast[2]))
    if op == "s":
        return {((("s", ast[1]), Fraction(1)),): Fraction(1)}
    if op == "c":
        return {((("c", ast[1]), Fraction(1)),): Fraction(1)}
    if op == "+":
        r: dict = {}
        for a in ast[1:]:
            r = _padd(r, canonical_form(a))
        return r
    if op == "*":
        parts = [canonical_form(a) for a in ast[1:]]
        r = poly_const(Fraction(1))
        for p in parts:
            r = poly_mul(r, p)
        return r
    if op == "^":
        e = canonical_form(ast[2])
        ec = _as_const(e)
        if ec is not None and ec.denominator == 1 and abs(ec) > MAX_EXPONENT:
            b = canonical_form(ast[1])
            bc = _as_const(b)
            if bc is None or abs(bc) not in (0, 1):
                raise TooExpensive("exponent too large")
        b = canonical_form(ast[1])
        if ec is None:
            raise Unsupported("symbolic exponent")
        return _ppow(b, ec)
    if op == "root":
        n = _as_const(canonical_form(ast[2]))
        x = canonical_form(ast[1])
        if n is None or n.denominator != 1 or n <= 0:
            raise Unsupported("root index")
        if n > 1000:
            raise TooExpensive("root index too large")
        return _ppow(x, Fraction(1, int(n)))
    if op == "!":
        x = _as_const(canonical_form(ast[1]))
        if x is None or x.denominator != 1 or x < 0:
            raise Unsupported("factorial of a non-integer")
        if x > MAX_FACTORIAL:
            raise TooExpensive("factorial too large")
        return poly_const(Fraction(math.factorial(int(x))))
    if op == "binom":
        n = _as_const(canonical_form(ast[1]))
        k = _as_const(canonical_form(ast[2]))
        if n is None or k is None or n.denominator != 1 or k.denominator != 1:
            raise Unsupported("symbolic binomial")
        if n > 20_000 or n < -20_000:
            raise TooExpensive("binomial too large")
        if n < 0 or k < 0:
            raise Unsupported("negative binomial")
        return poly_const(Fraction(math.comb(int(n), int(k))))
    if op == "abs":
        x = canonical_form(ast[1])
        c = _as_const(x)
        if c is not None:
            return poly_const(abs(c))
        if len(x) == 1:
            (key, coef), = x.items()
            if all(a[0] == "p" or a in (("c", "pi"), ("c", "E")) for a, _ in key):
                return {key: abs(coef)}
        raise Unsupported("abs")
    if op == "f" and ast[1] in ("floor", "ceil"):
        c = _as_const(canonical_form(ast[2]))
        if c is None:
            raise Unsupported("floor of a non-rational")
        return poly_const(Fraction(math.floor(c) if ast[1] == "floor" else math.ceil(c)))
    if op in ("f", "log"):
        for a in ast[2:] if op == "f" else ast[1:]:
            canonical_form(a)  # size checks on the arguments
        raise Unsupported("function")
    raise Unsupported(op)  # pragma: no cover
