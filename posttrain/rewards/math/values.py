"""Structured answer values: what a normalised answer is (a scalar, an unordered list, a set, a
tuple or interval with its brackets, a union, a matrix, an equation, a relation, a ratio or plain
text), split at top-level separators and parsed element by element."""
from __future__ import annotations

import re

from posttrain.rewards.math.algebra import canonical_form
from posttrain.rewards.math.extract import match_brace
from posttrain.rewards.math.limits import (
    MAX_DEPTH, MAX_ELEMENTS, Hedged, TooExpensive, Undefined, Unparsable, Unsupported, current_deadline, tick,
)
from posttrain.rewards.math.normalise import (
    CJK, CJK_RE, PERCENT_RE, check_balanced, clean_answer, is_wordy, normalise_text, strip_units,
)
from posttrain.rewards.math.parse import GREEK, MINUS_ONE, parse_expr


class Scalar:
    """A scalar answer: its AST, whether it carried a percent sign, its text (compared as text
    against a text gold) and its canonical form, computed once on demand."""

    __slots__ = ("ast", "pct", "_canon", "_canon_err", "text")

    def __init__(self, ast, pct=False, text=""):
        self.ast = ast
        self.pct = pct
        self.text = text
        self._canon = None
        self._canon_err = None

    def canon(self):
        if self._canon is None and self._canon_err is None:
            try:
                self._canon = canonical_form(self.ast)
            except (Unsupported, Undefined, TooExpensive) as e:
                self._canon_err = e
        if self._canon_err is not None:
            raise self._canon_err
        return self._canon

    def __repr__(self):  # pragma: no cover
        return f"Scalar({self.ast!r}, pct={self.pct})"


# value kinds: ("scalar", Scalar) | ("text", str) | ("list", [v]) | ("set", [v])
#              ("seq", open, close, [v]) | ("union", [v]) | ("matrix", [[v]]) | ("eq", Scalar)
#              ("rel", (ops...), [Scalar]) | ("ratio", [Scalar, Scalar])

# a name on one side of "=": letters, a Greek letter (not any command: \not= 5 is no x = 5), f(2)
_NAME_LHS_RE = re.compile(
    r"^\s*(?:[A-Za-z]{1,3}(?:_\{?[0-9A-Za-z]+\}?)?|\\(?:" + "|".join(sorted(GREEK, key=len, reverse=True))
    + r")(?![A-Za-z])(?:_\{?[0-9A-Za-z]+\}?)?|[A-Za-z]\s*\([^()]*\))('*)\s*$"
)
_REL_TOKENS = [
    ("\\leqslant", "<="), ("\\geqslant", ">="), ("\\leq", "<="), ("\\geq", ">="), ("\\neq", "!="),
    ("\\le", "<="), ("\\ge", ">="), ("\\ne", "!="), ("\\lt", "<"), ("\\gt", ">"), ("<=", "<="),
    (">=", ">="), ("!=", "!="), ("=", "="), ("<", "<"), (">", ">"),
]
_TEXT_LIKE_RE = re.compile(r"^[\w\s'\".,!?;:()\-" + CJK + r"]+$")
_WORDS_ONLY_RE = re.compile(r"^[A-Za-z\s'\".,!?;:()\-" + CJK + r"]+$")


def _split_top(s: str, seps: list[tuple[str, str]]) -> list[str | tuple]:
    """Split s at depth 0 on the given separators; returns [part, (sep_tag), part, ...]."""
    out: list = []
    depth = 0
    start = 0
    i = 0
    n = len(s)
    while i < n:
        ch = s[i]
        if ch == "\\" and i + 1 < n and s[i + 1] in "{}":
            depth += 1 if s[i + 1] == "{" else -1
            i += 2
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            for lit, tag in seps:
                if s.startswith(lit, i) and not (
                    lit[-1].isalpha() and i + len(lit) < n and s[i + len(lit)].isalpha()
                ):
                    out.append(s[start:i])
                    out.append((tag,))
                    i += len(lit)
                    start = i
                    break
            else:
                i += 1
                continue
            continue
        i += 1
    out.append(s[start:])
    return out


def _outer_pair(s: str) -> tuple[str, str, str] | None:
    """If s is wholly wrapped in one bracket pair ((, [, \\{), return (open, inner, close)."""
    if s.startswith("\\{"):
        opener, body_start = "{", 2
    elif s.startswith("{") and s.endswith("}") and match_brace(s, 0) == len(s) - 1:
        return "g", s[1:-1], "}"  # plain TeX group
    elif s[:1] in ("(", "["):
        opener, body_start = s[0], 1
    else:
        return None
    depth = 0
    i = 0
    n = len(s)
    while i < n:
        ch = s[i]
        if ch == "\\" and i + 1 < n and s[i + 1] in "{}":
            depth += 1 if s[i + 1] == "{" else -1
            step = 2
        elif ch in "([{":
            depth += 1
            step = 1
        elif ch in ")]}":
            depth -= 1
            step = 1
        else:
            step = 1
        if depth == 0:
            end = i + step
            if end != n:
                return None
            if opener == "{":
                if not s.endswith("\\}"):
                    return None
                return "{", s[body_start:-2], "}"
            close = s[-1]
            if close not in ")]":
                return None
            return opener, s[body_start:-1], close
        i += step
    return None


def parse_value(raw: str, thousands: bool, level: int = 0) -> tuple:
    """The structured value of an answer (level 0: raw text, normalised here; deeper levels: one
    element of it).  ``thousands``: a comma between digit groups is a thousands separator."""
    tick()
    if level == 0:
        if not raw.strip():
            raise Unparsable("empty")
        s, pct = clean_answer(raw, thousands)
        if not s:
            raise Unparsable("empty")
        if check_balanced(s) > MAX_DEPTH:
            raise TooExpensive("nested too deeply")
        if pct:  # re-attached: it belongs to the last element of a list, or to the scalar
            s += "%"
    else:
        s = raw.strip()
    if level > 6:
        raise TooExpensive("structure nested too deeply")
    if not s:
        raise Unparsable("empty element")

    # \pm / \mp: two values
    m = re.search(r"\\(pm|mp)(?![A-Za-z])", s)
    if m:
        a = s[: m.start()] + ("+" if m.group(1) == "pm" else "-") + s[m.end() :]
        b = s[: m.start()] + ("-" if m.group(1) == "pm" else "+") + s[m.end() :]
        return ("list", [parse_value(a, thousands, level + 1), parse_value(b, thousands, level + 1)])

    # top-level list
    parts = [p for p in _split_top(s, [(",", ","), (";", ",")]) if not isinstance(p, tuple)]
    if len(parts) > 1:
        if len(parts) > MAX_ELEMENTS:
            raise TooExpensive("too many elements")
        if any(not p.strip() for p in parts):
            raise Unparsable("empty list element")
        return ("list", [parse_value(p, thousands, level + 1) for p in parts])

    # union of intervals / sets
    parts = [p for p in _split_top(s, [("\\cup", "u"), ("∪", "u")]) if not isinstance(p, tuple)]
    if len(parts) > 1:
        return ("union", [parse_value(p, thousands, level + 1) for p in parts])

    # x \in S
    parts = _split_top(s, [("\\in", "in")])
    if len(parts) == 3 and _NAME_LHS_RE.match(parts[0]):
        return parse_value(parts[2], thousands, level + 1)

    # ratio a:b
    parts = [p for p in _split_top(s, [(":", ":")]) if not isinstance(p, tuple)]
    if len(parts) == 2 and all(p.strip() for p in parts):
        return ("ratio", [Scalar(_parse_scalar(p)) for p in parts])

    # relations / equations
    parts = _split_top(s, _REL_TOKENS)
    if len(parts) > 1:
        return _parse_relation(parts, thousands, level)

    # sets, tuples, intervals
    if s in ("\\emptyset", "\\varnothing", "\\{\\}", "\\{ \\}", "{}"):
        return ("set", [])
    if s.strip() == "\\Reals":
        return ("seq", "(", ")", [_sv(["*", MINUS_ONE, ["c", "oo"]]), _sv(["c", "oo"])])
    mat = re.fullmatch(r"\\begin\{([pbB]?matrix)\}(.*)\\end\{\1\}", s, re.S)
    if mat:
        rows = mat.group(2).split("\x01")
        rows = [r for r in rows if r.strip()]
        cells = [[parse_value(c, thousands, level + 1) for c in r.split("&")] for r in rows]
        if not cells or len({len(r) for r in cells}) != 1:
            raise Unparsable("ragged matrix")
        return ("matrix", cells)
    pair = _outer_pair(s)
    if pair is not None:
        opener, inner, close = pair
        if opener == "g":  # {1,2} is a set, {x+1} a group
            if len([p for p in _split_top(inner, [(",", ",")]) if not isinstance(p, tuple)]) < 2:
                return parse_value(inner, thousands, level + 1)
            opener = "{"
        if opener == "{":
            if not inner.strip():
                return ("set", [])
            v = parse_value(inner, thousands, level + 1)
            return ("set", v[1] if v[0] == "list" else [v])
        elems = [p for p in _split_top(inner, [(",", ",")]) if not isinstance(p, tuple)]
        if len(elems) > 1:
            if len(elems) > MAX_ELEMENTS:
                raise TooExpensive("too many elements")
            return ("seq", opener, close, [parse_value(p, thousands, level + 1) for p in elems])
        if opener == "[" and close == ")" or opener == "(" and close == "]":
            raise Unparsable("half-open bracket around one value")
        if opener == "[" and close == "]":  # [x] is the integer part in some notations, not x
            raise Unparsable("square brackets around one value")

    # one scalar (or text)
    pct = False
    m = PERCENT_RE.search(s)
    if m:
        pct, s = True, s[: m.start()].strip()
    s2 = strip_units(s)
    if CJK_RE.search(s2) or (_WORDS_ONLY_RE.match(s2) and is_wordy(s2)):
        return ("text", normalise_text(s2))
    try:
        ast = parse_expr(s2)
    except Unparsable:
        if _TEXT_LIKE_RE.match(s2) and re.search(r"[A-Za-z]{2,}", s2):
            return ("text", normalise_text(s2))
        raise
    return ("scalar", Scalar(ast, pct, s2))


def _parse_relation(parts: list, thousands: bool, level: int) -> tuple:
    sides = [p for p in parts if not isinstance(p, tuple)]
    ops = [p[0] for p in parts if isinstance(p, tuple)]
    if any(not x.strip() for x in sides):
        raise Unparsable("empty side of a relation")
    if all(o == "=" for o in ops):
        if len(sides) > 2:
            return _parse_chain(sides, thousands, level)
        if _NAME_LHS_RE.match(sides[0]):  # x = 3, f(2) = 5: the right-hand side
            return parse_value(sides[-1], thousands, level + 1)
        if len(sides) == 2 and _NAME_LHS_RE.match(sides[1]):  # 3 = x
            return parse_value(sides[0], thousands, level + 1)
        lhs, rhs = (_parse_scalar(x) for x in sides)
        return ("eq", Scalar(["+", lhs, ["*", MINUS_ONE, rhs]]))
    if ops == ["!="]:
        if _NAME_LHS_RE.match(sides[1]) and not _NAME_LHS_RE.match(sides[0]):
            sides = sides[::-1]
        return ("rel", ("!=",), [Scalar(_parse_scalar(x)) for x in sides])
    if "=" in ops or "!=" in ops:
        raise Unparsable("mixed relation")
    # normalise direction to < / <=
    if all(o in (">", ">=") for o in ops):
        sides = sides[::-1]
        ops = [{">": "<", ">=": "<="}[o] for o in ops[::-1]]
    if not all(o in ("<", "<=") for o in ops):
        raise Unparsable("mixed inequality directions")
    oo = ["c", "oo"]
    names = [bool(_NAME_LHS_RE.match(x)) for x in sides]
    if len(sides) == 2 and names[0] != names[1]:
        if names[0]:  # x < b
            return ("seq", "(", ")" if ops[0] == "<" else "]",
                    [_sv(["*", MINUS_ONE, oo]), _sv(_parse_scalar(sides[1]))])
        return ("seq", "(" if ops[0] == "<" else "[", ")",
                [_sv(_parse_scalar(sides[0])), _sv(oo)])
    if len(sides) == 3 and names[1] and not names[0] and not names[2]:
        return ("seq", "(" if ops[0] == "<" else "[", ")" if ops[1] == "<" else "]",
                [_sv(_parse_scalar(sides[0])), _sv(_parse_scalar(sides[2]))])
    return ("rel", tuple(ops), [Scalar(_parse_scalar(x)) for x in sides])


def _parse_chain(sides: list, thousands: bool, level: int) -> tuple:
    """x = 1 + 2 = 3 (or x = y = 3) is its value 3 when every side that is not a bare name has
    that value; x = 4 = 3 gives two different values: a hedge."""
    from posttrain.rewards.math.compare import values_equal  # here: compare imports this module

    values = [x for x in sides if not _NAME_LHS_RE.match(x)] or sides[-1:]
    last = parse_value(values[-1], thousands, level + 1)
    deadline = current_deadline()
    for x in values[:-1]:
        if not values_equal(parse_value(x, thousands, level + 1), last, deadline):
            raise Hedged("an equation chain with different values")
    return last


def _sv(ast) -> tuple:
    return ("scalar", Scalar(ast))


def _parse_scalar(s: str) -> list:
    return parse_expr(strip_units(s.strip()))
