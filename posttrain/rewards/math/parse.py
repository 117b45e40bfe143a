"""Tokenizer and recursive-descent parser of a normalised scalar answer into a small JSON-friendly
AST (the form the canonical form, the numeric screen and the sympy worker all read)."""
from __future__ import annotations

import re
from fractions import Fraction

from posttrain.rewards.math.algebra import canonical_form
from posttrain.rewards.math.extract import match_brace
from posttrain.rewards.math.limits import TooExpensive, Undefined, Unparsable, Unsupported, tick

# AST nodes (JSON-friendly lists, so that they can be sent to the sympy worker as they are):
#   ["n", p, q] rational | ["s", name] | ["c", "pi"|"E"|"I"|"oo"] | ["+", ...] | ["*", ...]
#   ["^", b, e] | ["root", x, n] | ["f", name, x] | ["log", x, base] | ["!", x] | ["binom", n, k]
#   ["abs", x]
_FUNCS = {
    "sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
    "ln", "log", "exp", "arccot", "lg", "floor", "ceil",
}
_WORD_SPLIT_RE = re.compile(
    r"arcsin|arccos|arctan|arccot|sinh|cosh|tanh|sqrt|sin|cos|tan|cot|sec|csc|log|ln|exp|pi|infty|[A-Za-z]"
)
_NUM_RE = re.compile(r"(\d+)(?:\.(\d*))?(?:\\overline\{(\d+)\})?|\.(\d+)(?:\\overline\{(\d+)\})?")
# 1e0, 2.5E-3: an exponent mark glued to a number is read as that number (so 2e-1 is 0.2; 2e - 1
# with spaces, or 2e-x, is twice Euler's number minus something)
_EXP_MARK_RE = re.compile(r"[eE]([+-]?\d{1,5})(?![\d.A-Za-z_])")
_MAX_EXP_MARK = 4000
_CMD_RE = re.compile(r"\\([A-Za-z]+|.)")
# the commands read as a name; any other command the parser does not know (\cancel, \phantom,
# \color, \neg, \sim, \approx, \pmod, ...) makes the answer unparsable rather than a symbol or
# nothing, since what it does to the value is unknown
GREEK = frozenset({
    "alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta", "vartheta",
    "iota", "kappa", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau", "upsilon", "phi", "varphi",
    "chi", "psi", "omega", "Gamma", "Delta", "Theta", "Lambda", "Xi", "Sigma", "Phi", "Psi", "Omega",
    "varpi", "varrho", "varsigma", "Upsilon", "Pi", "ell",
})
# Marks over a name make another object (\hat{x}, \bar{z} the conjugate, \overline{AB} a
# segment, \vec{v}): read as a symbol of its own, never as the name under it.  Over anything else
# (\overline{3+2i}, \bar{5}, \dot{3}) the meaning is not one this parser computes: unparsable.
_MARKS = frozenset({
    "overline", "underline", "bar", "hat", "widehat", "vec", "overrightarrow", "mathring", "tilde",
    "widetilde", "dot", "ddot", "check", "breve", "acute", "grave",
})
_MARK_ARG_RE = re.compile(r"[A-Za-z]|\\[A-Za-z]+")
# one way only to read each name (a command is never split into a shorter one and letters): linear
_MARKED_RE = re.compile(r"\s*(?:[A-Za-z]|\\[A-Za-z]+(?![A-Za-z]))(?:\s*(?:[A-Za-z]|\\[A-Za-z]+(?![A-Za-z])))*\s*")


def _num_value(m: re.Match) -> Fraction:
    if m.group(1) is not None:
        ip, fp, rep = m.group(1), m.group(2) or "", m.group(3)
    else:
        ip, fp, rep = "0", m.group(4), m.group(5)
    v = Fraction(int(ip))
    if fp:
        v += Fraction(int(fp), 10 ** len(fp))
    if rep:
        v += Fraction(int(rep), (10 ** len(rep) - 1) * 10 ** len(fp))
    return v


def _tokenize(s: str) -> list[tuple[str, object]]:
    toks: list[tuple[str, object]] = []
    i, n = 0, len(s)
    while i < n:
        ch = s[i]
        if ch.isspace():
            i += 1
            continue
        if ch.isdigit() or (ch == "." and i + 1 < n and s[i + 1].isdigit()):
            m = _NUM_RE.match(s, i)
            if m is None:  # pragma: no cover
                raise Unparsable(s)
            if len(m.group(0)) > 2000:
                raise TooExpensive("number too long")
            if toks and toks[-1][0] == "num":
                raise Unparsable("two numbers in a row")
            v = _num_value(m)
            i = m.end()
            x = _EXP_MARK_RE.match(s, i)
            if x is not None and m.group(3) is None and m.group(5) is None:
                k = int(x.group(1))
                if abs(k) > _MAX_EXP_MARK:
                    raise TooExpensive("exponent too large")
                v *= Fraction(10) ** k
                i = x.end()
            toks.append(("num", v))
            continue
        if ch == "\\":
            m = _CMD_RE.match(s, i)
            if m is None:
                raise Unparsable("dangling backslash")
            name = m.group(1)
            i = m.end()
            if name in _MARKS:
                i = _marked_name(s, i, name, toks)
                continue
            if name in ("frac", "sqrt", "binom"):
                toks.append((name, None))
            elif name in ("cdot", "times", "ast"):
                toks.append(("op", "*"))
            elif name == "div":
                toks.append(("op", "/"))
            elif name == "pi":
                toks.append(("const", "pi"))
            elif name in ("infty", "infin"):
                toks.append(("const", "oo"))
            elif name in _FUNCS:
                toks.append(("func", name))
            elif name in ("{", "}"):
                toks.append(("op", "(" if name == "{" else ")"))
            elif name == "|":
                toks.append(("op", "|"))
            elif name in ("vert", "lvert", "rvert", "mid"):
                toks.append(("op", "|"))
            elif name in ("lfloor", "rfloor", "lceil", "rceil", "ldots", "cdots", "dots", "pm", "mp",
                          "le", "ge", "leq", "geq", "ne", "neq", "lt", "gt", "in", "cup", "cap",
                          "to", "infty", "over", "choose", "Reals", "emptyset", "varnothing",
                          "begin", "end", "%", "hline", "sum", "prod", "int"):
                raise Unparsable("unsupported command \\" + name)
            elif name in GREEK:
                toks.append(("name", name))
            else:
                raise Unparsable("unsupported command \\" + name)
            continue
        if ch.isalpha() and ch.isascii():
            j = i
            while j < n and s[j].isascii() and s[j].isalpha():
                j += 1
            word = s[i:j]
            for w in _WORD_SPLIT_RE.findall(word):
                if w in _FUNCS:
                    toks.append(("func", w))
                elif w == "sqrt":
                    toks.append(("sqrt", None))
                elif w == "pi":
                    toks.append(("const", "pi"))
                elif w == "infty":
                    toks.append(("const", "oo"))
                elif w == "e":
                    toks.append(("const", "E"))
                elif w == "i":
                    toks.append(("const", "I"))
                else:
                    toks.append(("name", w))
            i = j
            continue
        if ch == "_":
            # subscript glued to the previous name / function
            i += 1
            while i < n and s[i] == " ":
                i += 1
            if i < n and s[i] == "{":
                j = match_brace(s, i)
                if j < 0:
                    raise Unparsable("unbalanced braces")
                sub = s[i + 1 : j]
                i = j + 1
            elif i < n:
                sub = s[i]
                i += 1
            else:
                raise Unparsable("dangling subscript")
            if not toks or toks[-1][0] not in ("name", "func", "const"):
                raise Unparsable("subscript without a base")
            kind, val = toks[-1]
            if kind == "func":
                if val not in ("log", "ln"):
                    raise Unparsable("subscript on a function")
                toks[-1] = ("logbase", sub)
            else:
                nm = {"E": "e", "I": "i", "pi": "pi", "oo": "oo"}.get(val, val) if kind == "const" else val
                toks[-1] = ("name", f"{nm}_{re.sub(r'[^0-9A-Za-z]', '', sub)}")
            continue
        if ch in "+-*/^!()[]{}|,":
            toks.append(("op", ch))
            i += 1
            continue
        if ch == "'":
            raise Unparsable("prime")
        raise Unparsable(f"unexpected character {ch!r}")
    return toks


def _marked_name(s: str, i: int, mark: str, toks: list) -> int:
    """The symbol of a mark over names (``\\hat{x}``, ``\\vec v``) appended to toks; returns the index
    after it.  Unparsable over anything but names."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i < len(s) and s[i] == "{":
        j = match_brace(s, i)
        if j < 0:
            raise Unparsable("unbalanced braces")
        arg, end = s[i + 1 : j], j + 1
    else:
        m = _MARK_ARG_RE.match(s, i)
        if m is None:
            raise Unparsable(f"\\{mark} over something other than a name")
        arg, end = m.group(0), m.end()
    if not _MARKED_RE.fullmatch(arg) or any(c not in GREEK for c in re.findall(r"\\([A-Za-z]+)", arg)):
        raise Unparsable(f"\\{mark} over something other than a name")
    toks.append(("name", "\\" + mark + "{" + re.sub(r"\s+", "", arg) + "}"))
    return end


MINUS_ONE = ["n", -1, 1]


def rational_node(v: Fraction) -> list:
    """The AST node of a rational number."""
    return ["n", v.numerator, v.denominator]


class _Parser:
    def __init__(self, toks):
        self.t = toks
        self.i = 0
        self.depth = 0

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else ("eof", None)

    def take(self):
        tok = self.peek()
        self.i += 1
        return tok

    def expect(self, val):
        tok = self.take()
        if tok != ("op", val):
            raise Unparsable(f"expected {val!r}")

    def enter(self):
        tick()
        self.depth += 1
        if self.depth > 120:
            raise TooExpensive("expression nested too deeply")

    def parse(self):
        if not self.t:
            raise Unparsable("empty")
        e = self.expr()
        if self.i != len(self.t):
            raise Unparsable("trailing tokens")
        return e

    def expr(self):
        self.enter()
        terms = [self.term()]
        while True:
            tok = self.peek()
            if tok == ("op", "+"):
                self.take()
                terms.append(self.term())
            elif tok == ("op", "-"):
                self.take()
                terms.append(["*", MINUS_ONE, self.term()])
            else:
                break
        self.depth -= 1
        return terms[0] if len(terms) == 1 else ["+"] + terms

    def _starts_primary(self, tok):
        k, v = tok
        if k in ("num", "name", "const", "func", "frac", "sqrt", "binom", "logbase"):
            return True
        return k == "op" and v in ("(", "[", "{")

    def term(self):
        self.enter()
        factors = [self.unary()]
        while True:
            tok = self.peek()
            if tok == ("op", "*"):
                self.take()
                factors.append(self.unary())
            elif tok == ("op", "/"):
                self.take()
                factors.append(["^", self.unary(), MINUS_ONE])
            elif self._starts_primary(tok):
                if tok[0] == "num" and factors and self._ends_with_number(factors[-1]):
                    raise Unparsable("two numbers in a row")
                factors.append(self.power())
            else:
                break
        self.depth -= 1
        return factors[0] if len(factors) == 1 else ["*"] + factors

    @staticmethod
    def _ends_with_number(node):
        return node[0] == "n"

    def unary(self):
        self.enter()
        tok = self.peek()
        if tok == ("op", "-"):
            self.take()
            r = ["*", MINUS_ONE, self.unary()]
        elif tok == ("op", "+"):
            self.take()
            r = self.unary()
        else:
            r = self.power()
        self.depth -= 1
        return r

    def power(self):
        self.enter()
        base = self.postfix()
        if self.peek() == ("op", "^"):
            self.take()
            exp = self.exponent()
            base = ["^", base, exp]
            while self.peek() == ("op", "!"):
                self.take()
                base = ["!", base]
        self.depth -= 1
        return base

    def exponent(self):
        self.enter()
        tok = self.peek()
        if tok == ("op", "-"):
            self.take()
            r = ["*", MINUS_ONE, self.exponent()]
        elif tok == ("op", "+"):
            self.take()
            r = self.exponent()
        else:
            r = self.power()  # right associative: a^b^c = a^(b^c)
        self.depth -= 1
        return r

    def postfix(self):
        node = self.primary()
        while self.peek() == ("op", "!"):
            self.take()
            node = ["!", node]
        return node

    def group(self):
        """{ expr } or a single primary (LaTeX macro argument)."""
        tok = self.peek()
        if tok == ("op", "{"):
            self.take()
            e = self.expr()
            self.expect("}")
            return e
        if tok[0] in ("num", "name", "const"):
            return self.primary()
        raise Unparsable("bad macro argument")

    def primary(self):
        self.enter()
        k, v = self.take()
        if k == "eof":
            raise Unparsable("unexpected end of expression")
        if k == "num":
            r = rational_node(v)
        elif k == "name":
            r = ["s", v]
        elif k == "const":
            r = ["c", v]
        elif k == "op" and v in ("(", "[", "{"):
            close = {"(": ")", "[": "]", "{": "}"}[v]
            r = self.expr()
            self.expect(close)
        elif k == "op" and v == "|":
            r = ["abs", self.expr()]
            self.expect("|")
        elif k == "frac":
            a = self.group()
            b = self.group()
            r = ["*", a, ["^", b, MINUS_ONE]]
        elif k == "binom":
            a = self.group()
            b = self.group()
            r = ["binom", a, b]
        elif k == "sqrt":
            idx = ["n", 2, 1]
            if self.peek() == ("op", "["):
                self.take()
                idx = self.expr()
                self.expect("]")
            r = ["root", self.group(), idx]
        elif k in ("func", "logbase"):
            power = None
            if self.peek() == ("op", "^"):  # \sin^2 x
                self.take()
                power = self.exponent()
            if self.peek() == ("op", "("):
                self.take()
                arg = self.expr()
                self.expect(")")
            else:
                arg = self.power()
            if k == "logbase":
                base_toks = _tokenize(v)
                base = _Parser(base_toks).parse()
                r = ["log", arg, base]
            elif v == "lg":
                r = ["log", arg, ["n", 10, 1]]
            else:
                r = ["f", v, arg]
            if power is not None:
                r = ["^", r, power]
        else:
            raise Unparsable(f"unexpected token {v!r}")
        self.depth -= 1
        return r


def parse_expr(s: str) -> list:
    """The AST of one normalised scalar expression; Unparsable / TooExpensive when there is none."""
    ast = _Parser(_tokenize(s)).parse()
    if _has_infinity(ast):
        _check_infinity(ast)
    return ast


def _has_infinity(ast) -> bool:
    stack = [ast]
    while stack:
        node = stack.pop()
        if node[0] == "c" and node[1] == "oo":
            return True
        if node[0] not in ("n", "s", "c"):
            stack.extend(x for x in node[1:] if isinstance(x, list))
    return False


_PLUS_INFINITY = ((("c", "oo"), Fraction(1)),)


def _check_infinity(ast) -> None:
    """Infinity is a value only as +-infinity itself (an interval end, a limit); arithmetic with it
    (oo - oo, 0 * oo, oo / oo, oo^0, 2 oo, oo + 1) is undefined or a form nobody answers with."""
    try:
        c = canonical_form(ast)
    except (Unsupported, Undefined):
        raise Unparsable("arithmetic with infinity") from None
    if len(c) != 1 or _PLUS_INFINITY not in c or abs(c[_PLUS_INFINITY]) != 1:
        raise Unparsable("arithmetic with infinity")
