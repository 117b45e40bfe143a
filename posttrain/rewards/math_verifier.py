"""Math answer verifier: is the final boxed answer of a response mathematically equal to the gold?

Public API (the rest of the project depends on exactly this):

    MATH_VERIFIER_VERSION                  bump whenever a verdict can change
    Verdict(reward, reason, answer)        frozen dataclass
    extract_final_answer(response)         -> (answer | None, reason)
    verify_math(response, gold)            -> Verdict; never raises, one deadline: returns in < 1 s
    verify_stream(lines, out)              JSON-lines CLI body -> counts (bad_input lines)
    GoldAnswerError, check_gold(gold)      raise on a gold answer that cannot be parsed

How a verdict is reached
------------------------
1. Extraction.  The answer part of a response is what follows the last ``</think>``; with no
   ``</think>`` it is the whole response, except that a ``<think>`` that is never closed means the
   generation was truncated mid-thought (score 0: ``think_only`` if it holds a box, else ``no_box``).
   The final answer is the content of the LAST ``\\boxed{...}`` / ``\\fbox{...}`` (braces nest, ``\\{``
   escapes are honoured) or ``\\boxed 5`` (one token, no braces).  A box that is never closed
   (truncated output) gives ``unparsable_response``.  Several boxes in the answer part whose values
   differ mathematically give ``hedged``.
2. Normalisation of LaTeX/plain text (``$``, ``\\left``/``\\right``, spacing commands, ``\\text{}``
   wrappers, ``\\dfrac``/``\\tfrac``, degrees, unit words after a number, trailing period, unicode
   minus, thousands separators, ...) and parsing into a small structured value: scalar expression,
   unordered list (``1, 2``), set (``\\{1,2\\}``), tuple/interval with its brackets (``[1,2)``), union
   of intervals, matrix, equation, relation, or plain text (``Yes``, ``(B)``, Chinese words).
3. Comparison, always exact (never a float tolerance):
   * fast path: plain numbers compare as ``fractions.Fraction`` (no sympy, microseconds);
   * a pure-Python canonical form for polynomials over Q in symbols, pi, e, i and real radicals of
     rationals (products of prime powers with fractional exponents are linearly independent over Q,
     so the form is canonical) decides ``(x+1)^2 = x^2+2x+1``, ``\\sqrt{8} = 2\\sqrt{2}``,
     ``\\sqrt[3]{8} = 2``, ``0.125 = 1/8``, ``3.14159265 != \\pi`` without sympy;
   * what that cannot decide (trig/log, division by a sum, ...) is first screened numerically
     (a large numeric difference proves inequality; closeness proves nothing) and then decided by
     ``sympy.simplify(a - b) == 0`` in a persistent worker subprocess that is killed and respawned
     when it overruns its time budget (``timeout``).  sympy is never imported in the caller.
   Inputs built to hang a CAS (power towers, huge factorials, deep nesting, very long answers) are
   rejected by cheap size checks before any sympy work (``too_expensive``).
4. One deadline (``_TIME_BUDGET_S``) covers the whole call: box scan, parsing, every box of a
   hedge check, the canonical form and the sympy worker all check it, so no input (2,000 boxes,
   a 1 MB response) keeps a call past 1 s; when it runs out the verdict is 0 with ``timeout``.

Interpretation choices (documented contract points)
---------------------------------------------------
* Percent: ``50\\%`` matches gold ``50`` and gold ``0.5`` (and symmetrically gold ``50\\%`` matches
  answers ``50``, ``0.5`` and ``50\\%``).
* Commas: ``1,000`` is one thousand only when every group after the first has exactly 3 digits and
  the gold is a single value; otherwise a top-level comma separates elements.  An unbracketed list
  (``1, 2`` or ``2 or 3``) is order-free; ``(1, 2)`` is ordered; ``\\{...\\}`` is a set; ``[1,2)`` is an
  interval whose ends must match.  A one-element set equals its element.
* ``x = 3`` (any short name on the left, also ``x \\in [1,2)``) is compared by its right-hand side;
  ``x > 3`` / ``3 \\le x < 5`` are compared as the intervals they denote.
* ``a \\pm b`` is the unordered pair ``a+b, a-b``.
* A mixed number ``2\\frac{1}{2}`` is 5/2.  ``2^10`` (no braces) is 2 to the 10th.
* ``e`` is Euler's number, ``i`` the imaginary unit, ``\\log`` the natural log.
* A box that is never closed is ``unparsable_response``; an empty box too.  ``extract_final_answer``
  returns ``(answer, "ok")`` when it finds one.
* ``5 \\text{ or } 6`` for a single-valued gold is ``hedged``; for a list gold it is the list 5, 6.
* A ratio ``a:b`` matches ``a:b`` and proportional ratios (``6:8`` = ``3:4``), not the number a/b.
* ``\\lfloor x \\rfloor`` / ``\\lceil x \\rceil`` are floor / ceiling; ``\\overline{AB}`` is the group AB.
* Unit words are dropped only after a number and only if they look like units (``cm``, ``apples``,
  ``meters per second``), so ``2 x`` stays the product 2x; the unit itself is not compared.
  Words that change the value are read with it, never dropped: ``5 thousand`` is 5000,
  ``5 \\text{k}`` 5000, ``2 dozen`` 24, ``3 halves`` 3/2, ``5 squared`` 25, ``5 factorial`` 120
  (leading words only: ``5 cm squared`` is 5).  A qualifier (``3 \\text{ or more}``, ``about``,
  ``at least``) leaves no single value: ``unparsable_response``.
* Infinity is a value only as ``\\infty`` / ``-\\infty``; arithmetic with it (``\\infty-\\infty``,
  ``0\\cdot\\infty``, ``\\infty^0``, ``\\infty+1``) is ``unparsable_response``.
* An equation chain is its common value (``x = 1 + 2 = 3`` is 3); one whose sides differ
  (``x = 4 = 3``) is ``hedged`` (as a gold: unparsable).
* An exponent mark glued to a number is read as a number: ``1e0`` is 1, ``2.5E3`` 2500, ``2e-1``
  0.2 (``2e - 1`` with spaces is 2e minus 1).  Unicode superscript runs are one exponent
  (``2¹⁰`` is 1024); subscripts are never digits (``10₂`` is not 102: unparsable).
* A gold that is parseable but too expensive to evaluate is not an error for ``check_gold``
  (verify_math scores 0 with ``too_expensive`` unless the answer is the identical string).
"""
from __future__ import annotations

import atexit
import cmath
import json
import math
import os
import re
import select
import subprocess
import sys
import threading
import time
import unicodedata
import zlib
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import BinaryIO, Iterable, TextIO

MATH_VERIFIER_VERSION = "math-verifier/2"

__all__ = [
    "MATH_VERIFIER_VERSION",
    "Verdict",
    "GoldAnswerError",
    "extract_final_answer",
    "verify_math",
    "verify_stream",
    "check_gold",
]


@dataclass(frozen=True)
class Verdict:
    reward: float  # 1.0 or 0.0
    reason: str  # match | mismatch | no_box | think_only | hedged | unparsable_response |
    #              unparsable_gold | too_expensive | timeout | empty_gold
    answer: str | None  # the extracted final answer text (None if none)


class GoldAnswerError(ValueError):
    """A gold answer that cannot be parsed; the message names the gold string."""


# ----------------------------------------------------------------------------------------------
# limits (cheap checks done before any exact / CAS work)
# ----------------------------------------------------------------------------------------------
_TIME_BUDGET_S = 0.85  # whole verify_math call, worker included
_WORKER_CALL_S = 0.6  # one sympy request
_MAX_RAW_ANSWER = 3000  # characters of a box content / gold string
_MAX_CLEAN = 1200  # characters after normalisation
_MAX_DEPTH = 40  # bracket nesting
_MAX_BITS = 40_000  # bit length of any exact integer we build
_MAX_EXPONENT = 100_000  # |integer exponent| on a non-trivial base
_MAX_FACTORIAL = 3000
_MAX_POLY_POWER = 40  # integer power of a sum
_MAX_TERMS = 3000  # terms of an expanded polynomial
_MAX_ELEMENTS = 64  # elements of a list / set / tuple
_MAX_NODES = 600  # AST nodes sent to sympy


class _Unparsable(Exception):
    pass


class _TooExpensive(Exception):
    pass


class _Unsupported(Exception):
    """The pure-Python canonical form cannot decide this expression."""


class _Undefined(Exception):
    """Division by zero and the like: the expression has no value."""


class _Timeout(Exception):
    pass


class _Hedged(_Unparsable):
    """Two different values given as one answer (``x = 4 = 3``): a hedge in a response, an
    unparsable gold."""


# One deadline per verify_math call, armed for this thread while the call runs: the parser, the
# canonical form, the box scan and every comparison check it (_tick), not only the sympy worker.
_ACTIVE = threading.local()


def _tick() -> None:
    d = getattr(_ACTIVE, "deadline", None)
    if d is not None and time.monotonic() > d.t:
        raise _Timeout()


# ----------------------------------------------------------------------------------------------
# extraction
# ----------------------------------------------------------------------------------------------
_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"
_TRAIL_PUNCT = ".,;:?。，；：？、 \t\r\n"


_BRACE_SCAN_RE = re.compile(r"\\.|[{}]", re.S)


def _match_brace(text: str, i: int) -> int:
    """Index of the brace closing the '{' at text[i], or -1; backslash escapes are skipped."""
    depth = 0
    for k, m in enumerate(_BRACE_SCAN_RE.finditer(text, i)):  # visits braces and escapes only
        if k & 4095 == 4095:
            _tick()
        ch = m.group(0)
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return m.start()
    return -1


_BARE_TOKEN_RE = re.compile(r"[^\s$]+")


def _find_boxes(text: str) -> list[str | None]:
    """Contents of the top-level boxes in text, in order; None marks a box that is never closed."""
    out: list[str | None] = []
    pos = 0
    n = len(text)
    while True:
        _tick()
        m = _BOX_RE.search(text, pos)
        if m is None:
            return out
        i = m.end()
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i < n and text[i] == "{":
            j = _match_brace(text, i)
            if j < 0:
                out.append(None)
                return out
            out.append(text[i + 1 : j])
            pos = j + 1
        else:
            t = _BARE_TOKEN_RE.match(text, i)
            if t is None:
                out.append(None)
                return out
            tok = t.group(0)
            # "\boxed 5." / "\boxed 5\)" : keep the token itself
            tok = re.sub(r"(\\\)|\\\])+$", "", tok).rstrip(_TRAIL_PUNCT)
            out.append(tok if tok else None)
            if not tok:
                return out
            pos = t.end()


def _split_think(response: str) -> tuple[str, str]:
    """(reasoning part, answer part)."""
    close = response.rfind(_THINK_CLOSE)
    if close >= 0:
        think = response[:close]
        ans = response[close + len(_THINK_CLOSE) :]
        k = ans.find(_THINK_OPEN)
        if k >= 0:  # a new thought opened after the answer and never closed
            think, ans = think + ans[k:], ans[:k]
        return think, ans
    if _THINK_OPEN in response:  # truncated mid-thought
        return response, ""
    return "", response


def _extract_boxes(response: str) -> tuple[list[str | None], str | None]:
    think, ans = _split_think(response)
    boxes = _find_boxes(ans) if "\\" in ans else []
    if not boxes:
        if think and _BOX_RE.search(think):
            return [], "think_only"
        return [], "no_box"
    if boxes[-1] is None or not boxes[-1].strip():  # truncated or empty box
        return boxes, "unparsable_response"
    return boxes, None


def extract_final_answer(response: str) -> tuple[str | None, str]:
    """The final answer text (content of the last box of the answer part) and "ok", or None and the
    reason (no_box | think_only | hedged | unparsable_response | timeout)."""
    try:
        if not isinstance(response, str):
            return None, "unparsable_response"
        with _armed(_TIME_BUDGET_S) as deadline:
            boxes, reason = _extract_boxes(response)
            if reason is not None:
                return None, reason
            answer = boxes[-1]
            assert answer is not None
            thousands = any(b is not None and _THOUSANDS_WHOLE_RE.match(b.strip()) for b in boxes)
            if len(boxes) > 1 and _is_hedged(boxes, thousands, deadline):
                return None, "hedged"
        return answer, "ok"
    except _Timeout:
        return None, "timeout"
    except Exception:  # pragma: no cover - defensive
        return None, "unparsable_response"


# ----------------------------------------------------------------------------------------------
# normalisation
# ----------------------------------------------------------------------------------------------
_UNICODE_MAP = {
    "\u2212": "-", "\u2013": "-", "\u2014": "-", "\ufe63": "-", "\uff0d": "-", "\u2010": "-",
    "\u2011": "-", "\u00d7": r"\times ", "\u22c5": r"\cdot ", "\u00b7": r"\cdot ", "\u2217": "*",
    "\u00f7": r"\div ", "\u03c0": r"\pi ", "\u221e": r"\infty ", "\u221a": r"\sqrt", "\u00b0": r"^\circ",
    "\u2264": r"\le ", "\u2265": r"\ge ", "\u2260": r"\ne ", "\u222a": r"\cup ", "\u2229": r"\cap ",
    "\u00b1": r"\pm ", "\u2213": r"\mp ", "\u2208": r"\in ", "\u2205": r"\emptyset ",
    "\u00bd": r"\frac{1}{2}", "\u2153": r"\frac{1}{3}", "\u2154": r"\frac{2}{3}", "\u00bc": r"\frac{1}{4}",
    "\u00be": r"\frac{3}{4}", "\u211d": r"\mathbb{R}", "\u3002": ".", "\u00a0": " ", "\u2009": " ",
    "\u202f": " ", "\u3000": " ", "\u2032": "'", "\u03b8": r"\theta ", "\u03b1": r"\alpha ",
    "\u03b2": r"\beta ",
}
_UNICODE_RE = re.compile("|".join(re.escape(k) for k in _UNICODE_MAP))
# A run of superscripts is one exponent (2¹⁰ is 2^{10}) and a run of subscripts one subscript
# (10₂ is 10_{2}, not the digits 102): mapped before NFKC, which would flatten both into the line.
_SUPERSCRIPTS = dict(zip("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱ", "0123456789+-=()ni"))
_SUBSCRIPTS = dict(zip("₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₒₓₔₕₖₗₘₙₚₛₜᵢⱼᵣᵤᵥ", "0123456789+-=()aeoxəhklmnpstijruv"))
_SUPER_RUN_RE = re.compile("[" + "".join(_SUPERSCRIPTS) + "]+")
_SUB_RUN_RE = re.compile("[" + "".join(_SUBSCRIPTS) + "]+")

_WRAPPERS = (
    "text", "textbf", "textit", "textrm", "textsf", "texttt", "textnormal", "mathrm", "mathbf",
    "mathit", "mathsf", "mathtt", "mathnormal", "mbox", "hbox", "operatorname", "boldsymbol", "bm",
    "emph", "boxed", "fbox", "displaystyle", "underline", "mathbb", "mathcal", "pmb",
)
_WRAPPER_RE = re.compile(r"\\(?:" + "|".join(_WRAPPERS) + r")\s*\{")
_TEXTISH = r"\\(?:text|textrm|textnormal|textit|textbf|mathrm|mbox|hbox|textsf)\s*"
# \text{ or } / \text{and} between values: a list separator
_TEXT_OR_RE = re.compile(_TEXTISH + r"\{\s*(?:or|and|,)\s*\}")
# \text{ cm}, \mathrm{~m}^2 after a number: a unit, dropped (unless its words change the value)
_TEXT_UNIT_RE = re.compile(
    r"(?<=[\d}.)])\s*" + _TEXTISH + r"\{\s*(?P<u>[A-Za-z\u4e00-\u9fff][^{}\d]*)\}(?:\s*\^\s*\{?\s*[23]\s*\}?)?"
)
# Words after a number that change its value: read with the number, never dropped as a unit
# (5 thousand is 5000, 3 halves is 3/2).  Only leading words count: "5 cm squared" is 5 cm².
_VALUE_WORDS = {
    **dict.fromkeys(("hundred", "hundreds"), "*100"), **dict.fromkeys(("thousand", "thousands"), "*1000"),
    **dict.fromkeys(("million", "millions"), "*10^{6}"), **dict.fromkeys(("billion", "billions"), "*10^{9}"),
    **dict.fromkeys(("trillion", "trillions"), "*10^{12}"), **dict.fromkeys(("dozen", "dozens"), "*12"),
    "squared": "^2", "cubed": "^3", "factorial": "!",
    **dict.fromkeys(("half", "halves"), "/2"), **dict.fromkeys(("third", "thirds"), "/3"),
    **dict.fromkeys(("quarter", "quarters", "fourth", "fourths"), "/4"),
    **{w: f"/{d}" for d, ws in ((5, ("fifth", "fifths")), (6, ("sixth", "sixths")), (7, ("seventh", "sevenths")),
                                (8, ("eighth", "eighths")), (9, ("ninth", "ninths")), (10, ("tenth", "tenths")),
                                (100, ("hundredth", "hundredths")), (1000, ("thousandth", "thousandths")))
       for w in ws},
}
# in \text{} a lone k is the thousands prefix (5\text{k}); in math mode "5 k" stays the product 5k
_TEXT_VALUE_WORDS = {**_VALUE_WORDS, "k": "*1000"}
# Words that make the number something other than one exact value (3 or more, about 5): unparsable
_QUALIFIER_WORDS = {
    "or", "and", "not", "than", "more", "less", "fewer", "greater", "larger", "bigger", "smaller",
    "higher", "lower", "least", "most", "above", "below", "over", "under", "plus", "minus", "about",
    "around", "approximately", "approx", "roughly", "nearly", "almost", "ish",
}


def _unit_suffix(words: list[str], value_words: dict[str, str]) -> str:
    """What the words after a number leave of it: "" for a unit (dropped), an operator suffix for
    leading value words ("hundred thousand" -> "*100*1000"); _Unparsable for a qualifier."""
    low = [w.lower() for w in words]
    if any(w in _QUALIFIER_WORDS for w in low):
        raise _Unparsable("a qualified value is not one exact value")
    suffix = ""
    for w in words:
        w = w if len(w) == 1 else w.lower()  # k is kilo; K is kelvin, a unit
        if w not in value_words:
            break
        suffix += value_words[w]
    return suffix
_SPACING_RE = re.compile(r"\\[,;:!>]|\\(?:thinspace|negthinspace|medspace|thickspace)(?![A-Za-z])")
_WIDE_SPACE_RE = re.compile(r"\\q?quad(?![A-Za-z])|\\enspace(?![A-Za-z])|\\hspace\*?\{[^{}]*\}|\\ |~")
_SIZING_RE = re.compile(
    r"\\(?:left|right)\s*\."
    r"|\\(?:left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|Biggl|Biggr|bigm|big|Big|bigg|Bigg)(?![A-Za-z])"
)
_DEGREE_RE = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ(?![A-Za-z])|\\circ(?![A-Za-z])|\^?\s*\\degree(?![A-Za-z])")
_PERCENT_RE = re.compile(r"\s*(?:\\%|%|\\text\{\s*\\?%\s*\}|\\percent(?![A-Za-z]))\s*$")
_FRAC_NAMES_RE = re.compile(r"\\[dtc]frac(?![A-Za-z])")
_BINOM_NAMES_RE = re.compile(r"\\[dt]binom(?![A-Za-z])")
_SINGLE_ARG = r"(\d|[A-Za-z]|\\[A-Za-z]+)"
_FRAC_TT_RE = re.compile(r"\\(frac|binom)\s*" + _SINGLE_ARG + r"\s*" + _SINGLE_ARG)
_FRAC_TG_RE = re.compile(r"\\(frac|binom)\s*" + _SINGLE_ARG + r"\s*\{")
_FRAC_GT_RE = re.compile(r"\\(frac|binom)\s*(\{(?:[^{}]|\{[^{}]*\})*\})\s*" + _SINGLE_ARG)
_SQRT_T_RE = re.compile(r"\\sqrt\s*(\d|[A-Za-z](?![A-Za-z])|\\[A-Za-z]+)")
_MIXED_RE = re.compile(r"(?<![\d.}^_)\]a-zA-Z])(\d+)\s*\\frac\{(\d+)\}\{(\d+)\}")
_THOUSANDS_WHOLE_RE = re.compile(r"^\$?\s*[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?\s*\$?\.?$")
_THOUSANDS_RE = re.compile(r"(?<![\d.])(\d{1,3})((?:,\d{3})+)(?![\d])")
_THOUSANDS_SPACE_RE = re.compile(r"(?<![\d.])(\d{1,3})((?: \d{3})+)(?![\d.])")
_OR_RE = re.compile(r"(?<![A-Za-z])or(?![A-Za-z])")
_OR_WORD_RE = re.compile(r"\s+(?:or|and)\s+")
_MATH_WORDS = {
    "sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
    "log", "ln", "exp", "pi", "sqrt", "inf", "infty", "oo", "lim", "mod", "gcd", "lcm", "max", "min",
}
_UNIT_WORDS_RE = re.compile(
    r"^(?P<v>.*?[\d}\)])\s+(?P<u>[A-Za-z]+(?:[\s/\-]+[A-Za-z]+)*)\s*(?:\^\s*\{?\s*[23]\s*\}?)?$"
)
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RE = re.compile("[" + _CJK + "]")
_CJK_UNIT_RE = re.compile(r"^(?P<v>.*?[\d}\)])\s*[" + _CJK + r"][" + _CJK + r"\s]*$")
_SIMPLE_NUM_RE = re.compile(r"^\s*\$?\s*([-+]?)(\d+(?:\.\d+)?|\.\d+)\s*\$?\s*\.?\s*$")


def _unwrap(s: str) -> str:
    """\\text{X} -> X for the wrapper commands (balanced braces); unbalanced -> _Unparsable."""
    for _ in range(200):
        m = _WRAPPER_RE.search(s)
        if m is None:
            return s
        j = _match_brace(s, m.end() - 1)
        if j < 0:
            raise _Unparsable("unbalanced braces")
        inner = s[m.end() : j]
        name = s[m.start() + 1 : m.end() - 1].strip()
        if name.startswith("mathbb") and inner.strip() == "R":
            inner = "\\Reals "
        s = s[: m.start()] + " " + inner + " " + s[j + 1 :]
    raise _TooExpensive("too many wrappers")


def _check_balanced(s: str) -> int:
    """Max nesting depth; _Unparsable when brackets/braces do not balance."""
    depth = 0
    brace = 0
    mx = 0
    i = 0
    n = len(s)
    while i < n:
        ch = s[i]
        if ch == "\\" and i + 1 < n:
            nx = s[i + 1]
            if nx == "{":
                depth += 1
            elif nx == "}":
                depth -= 1
            i += 2
            if depth < 0:
                raise _Unparsable("unbalanced brackets")
            mx = max(mx, depth)
            continue
        if ch == "{":
            brace += 1
            depth += 1
        elif ch == "}":
            brace -= 1
            depth -= 1
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if depth < 0 or brace < 0:
            raise _Unparsable("unbalanced brackets")
        if depth > mx:
            mx = depth
        i += 1
    if depth != 0 or brace != 0:
        raise _Unparsable("unbalanced brackets")
    return mx


def _clean(s: str, thousands: bool) -> tuple[str, bool]:
    """Normalise LaTeX / plain text.  Returns (string, percent flag)."""
    if len(s) > _MAX_RAW_ANSWER:
        raise _TooExpensive("answer too long")
    s = _SUPER_RUN_RE.sub(lambda m: "^{" + "".join(_SUPERSCRIPTS[c] for c in m.group(0)) + "}", s)
    s = _SUB_RUN_RE.sub(lambda m: "_{" + "".join(_SUBSCRIPTS[c] for c in m.group(0)) + "}", s)
    s = _UNICODE_RE.sub(lambda m: _UNICODE_MAP[m.group(0)], s)
    s = unicodedata.normalize("NFKC", s)
    s = s.replace("\\\\", "\x01")  # LaTeX row break (matrices)
    s = s.replace("\\$", " ").replace("$", " ")
    s = re.sub(r"\\[()\[\]]", " ", s)
    s = re.sub(r"\\(?:displaystyle|textstyle|scriptstyle|limits|nolimits)(?![A-Za-z])", " ", s)
    s = _SIZING_RE.sub("", s)
    s = re.sub(r"\\l(floor|ceil)(?![A-Za-z])", r"\\\1(", s)
    s = re.sub(r"\\r(?:floor|ceil)(?![A-Za-z])", ")", s)
    s = _SPACING_RE.sub("", s)
    s = _WIDE_SPACE_RE.sub(" ", s)
    s = s.replace("{,}", "").replace("\\lbrace", "\\{").replace("\\rbrace", "\\}")
    s = _DEGREE_RE.sub("", s)
    s = _FRAC_NAMES_RE.sub(r"\\frac", s)
    s = _BINOM_NAMES_RE.sub(r"\\binom", s)
    s = _TEXT_OR_RE.sub(",", s)
    s = _TEXT_UNIT_RE.sub(lambda m: _unit_suffix(re.findall(r"[A-Za-z]+", m.group("u")), _TEXT_VALUE_WORDS), s)
    # percent (before unwrapping, \text{\%})
    s = s.strip().rstrip(_TRAIL_PUNCT).strip()
    pct = False
    m = _PERCENT_RE.search(s)
    if m:
        pct = True
        s = s[: m.start()]
    s = _unwrap(s)
    s = re.sub(r"\\(?:mathbb|mathbf)\s*R(?![A-Za-z])", r"\\Reals ", s)
    s = s.replace("\\!", "")
    s = re.sub(r"\s+", " ", s).strip().rstrip(_TRAIL_PUNCT).strip()
    if not pct:
        m = _PERCENT_RE.search(s)
        if m:
            pct = True
            s = s[: m.start()].strip()
    s = _OR_WORD_RE.sub(", ", s) if re.search(r"\d|\\", s) else s
    if thousands:
        s = _THOUSANDS_RE.sub(lambda m: m.group(1) + m.group(2).replace(",", ""), s)
        s = _THOUSANDS_SPACE_RE.sub(lambda m: m.group(1) + m.group(2).replace(" ", ""), s)
    # \frac12, \frac1{2}, \frac{1}2, \sqrt2
    s = _FRAC_TT_RE.sub(r"\\\1{\2}{\3}", s)
    s = _FRAC_TG_RE.sub(r"\\\1{\2}{", s)
    s = _FRAC_GT_RE.sub(r"\\\1\2{\3}", s)
    s = _SQRT_T_RE.sub(r"\\sqrt{\1}", s)
    s = _MIXED_RE.sub(r"(\1+\\frac{\2}{\3})", s)
    if len(s) > _MAX_CLEAN:
        raise _TooExpensive("answer too long")
    return s, pct


# ----------------------------------------------------------------------------------------------
# tokenizer / parser -> AST (JSON-friendly lists)
#   ["n", p, q] rational | ["s", name] | ["c", "pi"|"E"|"I"|"oo"] | ["+", ...] | ["*", ...]
#   ["^", b, e] | ["root", x, n] | ["f", name, x] | ["log", x, base] | ["!", x] | ["binom", n, k]
#   ["abs", x]
# ----------------------------------------------------------------------------------------------
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
_GREEK = {
    "alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta", "vartheta",
    "iota", "kappa", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau", "upsilon", "phi", "varphi",
    "chi", "psi", "omega", "Gamma", "Delta", "Theta", "Lambda", "Xi", "Sigma", "Phi", "Psi", "Omega",
}


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
                raise _Unparsable(s)
            if len(m.group(0)) > 2000:
                raise _TooExpensive("number too long")
            if toks and toks[-1][0] == "num":
                raise _Unparsable("two numbers in a row")
            v = _num_value(m)
            i = m.end()
            x = _EXP_MARK_RE.match(s, i)
            if x is not None and m.group(3) is None and m.group(5) is None:
                k = int(x.group(1))
                if abs(k) > _MAX_EXP_MARK:
                    raise _TooExpensive("exponent too large")
                v *= Fraction(10) ** k
                i = x.end()
            toks.append(("num", v))
            continue
        if ch == "\\":
            m = _CMD_RE.match(s, i)
            if m is None:
                raise _Unparsable("dangling backslash")
            name = m.group(1)
            i = m.end()
            if name in ("overline", "vec", "hat", "bar", "widehat", "overrightarrow", "mathring"):
                continue  # decoration: \overline{AB} is the group {AB}
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
                raise _Unparsable("unsupported command \\" + name)
            elif name in _GREEK:
                toks.append(("name", name))
            elif name.isalpha():
                toks.append(("name", name))
            else:
                raise _Unparsable("unsupported command \\" + name)
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
                j = _match_brace(s, i)
                if j < 0:
                    raise _Unparsable("unbalanced braces")
                sub = s[i + 1 : j]
                i = j + 1
            elif i < n:
                sub = s[i]
                i += 1
            else:
                raise _Unparsable("dangling subscript")
            if not toks or toks[-1][0] not in ("name", "func", "const"):
                raise _Unparsable("subscript without a base")
            kind, val = toks[-1]
            if kind == "func":
                if val not in ("log", "ln"):
                    raise _Unparsable("subscript on a function")
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
            raise _Unparsable("prime")
        raise _Unparsable(f"unexpected character {ch!r}")
    return toks


_ONE = ["n", 1, 1]
_MINUS_ONE = ["n", -1, 1]


def _nfrac(v: Fraction) -> list:
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
            raise _Unparsable(f"expected {val!r}")

    def enter(self):
        _tick()
        self.depth += 1
        if self.depth > 120:
            raise _TooExpensive("expression nested too deeply")

    def parse(self):
        if not self.t:
            raise _Unparsable("empty")
        e = self.expr()
        if self.i != len(self.t):
            raise _Unparsable("trailing tokens")
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
                terms.append(["*", _MINUS_ONE, self.term()])
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
                factors.append(["^", self.unary(), _MINUS_ONE])
            elif self._starts_primary(tok):
                if tok[0] == "num" and factors and self._ends_with_number(factors[-1]):
                    raise _Unparsable("two numbers in a row")
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
            r = ["*", _MINUS_ONE, self.unary()]
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
            r = ["*", _MINUS_ONE, self.exponent()]
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
        raise _Unparsable("bad macro argument")

    def primary(self):
        self.enter()
        k, v = self.take()
        if k == "eof":
            raise _Unparsable("unexpected end of expression")
        if k == "num":
            r = _nfrac(v)
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
            r = ["*", a, ["^", b, _MINUS_ONE]]
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
            raise _Unparsable(f"unexpected token {v!r}")
        self.depth -= 1
        return r


def _parse_expr(s: str) -> list:
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
        c = _canon(ast)
    except (_Unsupported, _Undefined):
        raise _Unparsable("arithmetic with infinity") from None
    if len(c) != 1 or _PLUS_INFINITY not in c or abs(c[_PLUS_INFINITY]) != 1:
        raise _Unparsable("arithmetic with infinity")


# ----------------------------------------------------------------------------------------------
# structured values
# ----------------------------------------------------------------------------------------------
class _Scalar:
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
                self._canon = _canon(self.ast)
            except (_Unsupported, _Undefined, _TooExpensive) as e:
                self._canon_err = e
        if self._canon_err is not None:
            raise self._canon_err
        return self._canon

    def __repr__(self):  # pragma: no cover
        return f"_Scalar({self.ast!r}, pct={self.pct})"


# value kinds: ("scalar", _Scalar) | ("text", str) | ("list", [v]) | ("set", [v])
#              ("seq", open, close, [v]) | ("union", [v]) | ("matrix", [[v]]) | ("eq", _Scalar)
#              ("rel", (ops...), [_Scalar])

_NAME_LHS_RE = re.compile(
    r"^\s*(?:[A-Za-z]{1,3}(?:_\{?[0-9A-Za-z]+\}?)?|\\[A-Za-z]+(?:_\{?[0-9A-Za-z]+\}?)?|[A-Za-z]\s*\([^()]*\))('*)\s*$"
)
_REL_TOKENS = [
    ("\\leqslant", "<="), ("\\geqslant", ">="), ("\\leq", "<="), ("\\geq", ">="), ("\\neq", "!="),
    ("\\le", "<="), ("\\ge", ">="), ("\\ne", "!="), ("\\lt", "<"), ("\\gt", ">"), ("<=", "<="),
    (">=", ">="), ("!=", "!="), ("=", "="), ("<", "<"), (">", ">"),
]
_TEXT_LIKE_RE = re.compile(r"^[\w\s'\".,!?;:()\-" + _CJK + r"]+$")
_WORDS_ONLY_RE = re.compile(r"^[A-Za-z\s'\".,!?;:()\-" + _CJK + r"]+$")


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
    elif s.startswith("{") and s.endswith("}") and _match_brace(s, 0) == len(s) - 1:
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


_SHORT_UNITS = {
    "cm", "mm", "km", "m", "kg", "mg", "g", "ml", "l", "s", "h", "hr", "hrs", "ft", "in", "lb", "lbs",
    "oz", "mi", "yd", "yds", "mph", "kph", "kmh", "rs", "cc", "dm", "nm", "ms", "kw", "w", "v", "am", "pm",
}


def _strip_units(s: str) -> str:
    m = _UNIT_WORDS_RE.match(s)
    if m:
        words = [w for w in re.split(r"[\s/\-]+", m.group("u")) if w]
        unitish = [len(w) >= 3 or w.lower() in _SHORT_UNITS for w in words]
        if not any(w.lower() in _MATH_WORDS for w in words) and (
            all(unitish) or (len(words) > 1 and unitish[0] and all(len(w) >= 2 for w in words))
        ):
            return m.group("v").strip() + _unit_suffix(words, _VALUE_WORDS)
    m = _CJK_UNIT_RE.match(s)
    if m:
        return m.group("v").strip()
    return s


def _text_norm(s: str) -> str:
    s = s.lower()
    s = re.sub(r"[\s'\".,!?;:。，！？、]+", "", s)
    if len(s) == 3 and s[0] == "(" and s[2] == ")":
        s = s[1]
    return s


_SHORT_WORDS = {"no", "ok", "na", "up", "on", "at", "by", "to", "it", "is", "an", "am", "pm"}


def _wordy(s: str) -> bool:
    """Plain words (not a product of variables like "xy" or "AB")."""
    words = re.findall(r"[A-Za-z]+", s)
    content = [w for w in words if w.lower() not in _MATH_WORDS]
    if not content:
        return False
    if len(words) > 1 and any(len(w) >= 2 for w in content):
        return True
    return any(len(w) >= 3 or w.lower() in _SHORT_WORDS for w in content)


def _parse_value(raw: str, thousands: bool, level: int = 0) -> tuple:
    _tick()
    if level == 0:
        if not raw.strip():
            raise _Unparsable("empty")
        s, pct = _clean(raw, thousands)
        if not s:
            raise _Unparsable("empty")
        if _check_balanced(s) > _MAX_DEPTH:
            raise _TooExpensive("nested too deeply")
        if pct:  # re-attached: it belongs to the last element of a list, or to the scalar
            s += "%"
    else:
        s = raw.strip()
    if level > 6:
        raise _TooExpensive("structure nested too deeply")
    if not s:
        raise _Unparsable("empty element")

    # \pm / \mp: two values
    m = re.search(r"\\(pm|mp)(?![A-Za-z])", s)
    if m:
        a = s[: m.start()] + ("+" if m.group(1) == "pm" else "-") + s[m.end() :]
        b = s[: m.start()] + ("-" if m.group(1) == "pm" else "+") + s[m.end() :]
        return ("list", [_parse_value(a, thousands, level + 1), _parse_value(b, thousands, level + 1)])

    # top-level list
    parts = [p for p in _split_top(s, [(",", ","), (";", ",")]) if not isinstance(p, tuple)]
    if len(parts) > 1:
        if len(parts) > _MAX_ELEMENTS:
            raise _TooExpensive("too many elements")
        if any(not p.strip() for p in parts):
            raise _Unparsable("empty list element")
        return ("list", [_parse_value(p, thousands, level + 1) for p in parts])

    # union of intervals / sets
    parts = [p for p in _split_top(s, [("\\cup", "u"), ("∪", "u")]) if not isinstance(p, tuple)]
    if len(parts) > 1:
        return ("union", [_parse_value(p, thousands, level + 1) for p in parts])

    # x \in S
    parts = _split_top(s, [("\\in", "in")])
    if len(parts) == 3 and _NAME_LHS_RE.match(parts[0]):
        return _parse_value(parts[2], thousands, level + 1)

    # ratio a:b
    parts = [p for p in _split_top(s, [(":", ":")]) if not isinstance(p, tuple)]
    if len(parts) == 2 and all(p.strip() for p in parts):
        return ("ratio", [_Scalar(_parse_scalar(p)) for p in parts])

    # relations / equations
    parts = _split_top(s, _REL_TOKENS)
    if len(parts) > 1:
        return _parse_relation(parts, thousands, level)

    # sets, tuples, intervals
    if s in ("\\emptyset", "\\varnothing", "\\{\\}", "\\{ \\}", "{}"):
        return ("set", [])
    if s.strip() == "\\Reals":
        return ("seq", "(", ")", [_sv(["*", _MINUS_ONE, ["c", "oo"]]), _sv(["c", "oo"])])
    mat = re.fullmatch(r"\\begin\{([pbB]?matrix)\}(.*)\\end\{\1\}", s, re.S)
    if mat:
        rows = mat.group(2).split("\x01")
        rows = [r for r in rows if r.strip()]
        cells = [[_parse_value(c, thousands, level + 1) for c in r.split("&")] for r in rows]
        if not cells or len({len(r) for r in cells}) != 1:
            raise _Unparsable("ragged matrix")
        return ("matrix", cells)
    pair = _outer_pair(s)
    if pair is not None:
        opener, inner, close = pair
        if opener == "g":  # {1,2} is a set, {x+1} a group
            if len([p for p in _split_top(inner, [(",", ",")]) if not isinstance(p, tuple)]) < 2:
                return _parse_value(inner, thousands, level + 1)
            opener = "{"
        if opener == "{":
            if not inner.strip():
                return ("set", [])
            v = _parse_value(inner, thousands, level + 1)
            return ("set", v[1] if v[0] == "list" else [v])
        elems = [p for p in _split_top(inner, [(",", ",")]) if not isinstance(p, tuple)]
        if len(elems) > 1:
            if len(elems) > _MAX_ELEMENTS:
                raise _TooExpensive("too many elements")
            return ("seq", opener, close, [_parse_value(p, thousands, level + 1) for p in elems])
        if opener == "[" and close == ")" or opener == "(" and close == "]":
            raise _Unparsable("half-open bracket around one value")

    # one scalar (or text)
    pct = False
    m = _PERCENT_RE.search(s)
    if m:
        pct, s = True, s[: m.start()].strip()
    s2 = _strip_units(s)
    if _CJK_RE.search(s2) or (_WORDS_ONLY_RE.match(s2) and _wordy(s2)):
        return ("text", _text_norm(s2))
    try:
        ast = _parse_expr(s2)
    except _Unparsable:
        if _TEXT_LIKE_RE.match(s2) and re.search(r"[A-Za-z]{2,}", s2):
            return ("text", _text_norm(s2))
        raise
    return ("scalar", _Scalar(ast, pct, s2))


def _parse_relation(parts: list, thousands: bool, level: int) -> tuple:
    sides = [p for p in parts if not isinstance(p, tuple)]
    ops = [p[0] for p in parts if isinstance(p, tuple)]
    if any(not x.strip() for x in sides):
        raise _Unparsable("empty side of a relation")
    if all(o == "=" for o in ops):
        if len(sides) > 2:
            return _parse_chain(sides, thousands, level)
        if _NAME_LHS_RE.match(sides[0]):  # x = 3, f(2) = 5: the right-hand side
            return _parse_value(sides[-1], thousands, level + 1)
        if len(sides) == 2 and _NAME_LHS_RE.match(sides[1]):  # 3 = x
            return _parse_value(sides[0], thousands, level + 1)
        lhs, rhs = (_parse_scalar(x) for x in sides)
        return ("eq", _Scalar(["+", lhs, ["*", _MINUS_ONE, rhs]]))
    if ops == ["!="]:
        if _NAME_LHS_RE.match(sides[1]) and not _NAME_LHS_RE.match(sides[0]):
            sides = sides[::-1]
        return ("rel", ("!=",), [_Scalar(_parse_scalar(x)) for x in sides])
    if "=" in ops or "!=" in ops:
        raise _Unparsable("mixed relation")
    # normalise direction to < / <=
    if all(o in (">", ">=") for o in ops):
        sides = sides[::-1]
        ops = [{">": "<", ">=": "<="}[o] for o in ops[::-1]]
    if not all(o in ("<", "<=") for o in ops):
        raise _Unparsable("mixed inequality directions")
    oo = ["c", "oo"]
    names = [bool(_NAME_LHS_RE.match(x)) for x in sides]
    if len(sides) == 2 and names[0] != names[1]:
        if names[0]:  # x < b
            return ("seq", "(", ")" if ops[0] == "<" else "]",
                    [_sv(["*", _MINUS_ONE, oo]), _sv(_parse_scalar(sides[1]))])
        return ("seq", "(" if ops[0] == "<" else "[", ")",
                [_sv(_parse_scalar(sides[0])), _sv(oo)])
    if len(sides) == 3 and names[1] and not names[0] and not names[2]:
        return ("seq", "(" if ops[0] == "<" else "[", ")" if ops[1] == "<" else "]",
                [_sv(_parse_scalar(sides[0])), _sv(_parse_scalar(sides[2]))])
    return ("rel", tuple(ops), [_Scalar(_parse_scalar(x)) for x in sides])


def _parse_chain(sides: list, thousands: bool, level: int) -> tuple:
    """x = 1 + 2 = 3 (or x = y = 3) is its value 3 when every side that is not a bare name has
    that value; x = 4 = 3 gives two different values: a hedge."""
    values = [x for x in sides if not _NAME_LHS_RE.match(x)] or sides[-1:]
    last = _parse_value(values[-1], thousands, level + 1)
    deadline = _current_deadline()
    for x in values[:-1]:
        if not _values_equal(_parse_value(x, thousands, level + 1), last, deadline):
            raise _Hedged("an equation chain with different values")
    return last


def _sv(ast) -> tuple:
    return ("scalar", _Scalar(ast))


def _parse_scalar(s: str) -> list:
    return _parse_expr(_strip_units(s.strip()))


# ----------------------------------------------------------------------------------------------
# canonical form: polynomial over Q in atoms.  Poly = {monomial key: Fraction}; key = sorted tuple
# of (atom, exponent).  Atoms: ("p", prime) radical part of a prime, exponent in (0, 1);
# ("s", name) symbol; ("c", "pi"|"E"|"oo") constants; ("c", "I") imaginary unit, exponent 1.
# ----------------------------------------------------------------------------------------------
def _check_bits(x: Fraction) -> Fraction:
    if x.numerator.bit_length() > _MAX_BITS or x.denominator.bit_length() > _MAX_BITS:
        raise _TooExpensive("number too large")
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
                raise _Unsupported("fractional power of i")
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


def _pconst(v: Fraction) -> dict:
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


def _pmul(a: dict, b: dict) -> dict:
    if len(a) * len(b) > _MAX_TERMS:
        raise _TooExpensive("polynomial too large")
    r: dict = {}
    for ka, ca in a.items():
        _tick()
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
    if len(r) > _MAX_TERMS:
        raise _TooExpensive("polynomial too large")
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
        raise _Unsupported("number too large to factor")
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
            raise _Unsupported("cannot factor")
    return f


def _ppow(base: dict, e: Fraction) -> dict:
    if e.denominator == 1:
        n = int(e)
        c = _as_const(base)
        if c is not None:
            if c == 0:
                if n < 0:
                    raise _Undefined("division by zero")
                return {} if n > 0 else _pconst(Fraction(1))
            if abs(n) > _MAX_EXPONENT and abs(c) != 1:
                raise _TooExpensive("exponent too large")
            if max(c.numerator.bit_length(), c.denominator.bit_length()) * abs(n) > _MAX_BITS:
                raise _TooExpensive("power too large")
            return _pconst(c**n)
        if len(base) == 1:
            (key, coef), = base.items()
            if coef.numerator.bit_length() * abs(n) > _MAX_BITS or coef.denominator.bit_length() * abs(n) > _MAX_BITS:
                raise _TooExpensive("power too large")
            if abs(n) > _MAX_EXPONENT:
                raise _TooExpensive("exponent too large")
            mc, mk = _norm_mono({a: x * n for a, x in key})
            return {mk: _check_bits(coef**n * mc)}
        if n < 0:
            raise _Unsupported("negative power of a sum")
        if n > _MAX_POLY_POWER:
            raise _TooExpensive("power of a sum too large")
        result = _pconst(Fraction(1))
        sq = base
        while n:
            if n & 1:
                result = _pmul(result, sq)
            n >>= 1
            if n:
                sq = _pmul(sq, sq)
        return result
    # fractional exponent: only a monomial with a rational coefficient and pi/e/radical atoms
    if len(base) != 1:
        if not base:
            if e > 0:
                return {}
            raise _Undefined("zero to a non-positive power")
        raise _Unsupported("fractional power of a sum")
    (key, coef), = base.items()
    if any(a[0] == "s" or a == ("c", "I") or a == ("c", "oo") for a, _ in key):
        raise _Unsupported("fractional power of a symbol")
    if abs(e.numerator) > 1000 or e.denominator > 1000:
        raise _TooExpensive("exponent too large")
    sign = 1
    if coef < 0:
        if e.denominator % 2 == 0:
            raise _Unsupported("even root of a negative number")
        coef = -coef
        sign = -1 if e.numerator % 2 else 1
    exps: dict = {a: x * e for a, x in key}
    for p, k in _factor(coef.numerator).items():
        exps[("p", p)] = exps.get(("p", p), 0) + k * e
    for p, k in _factor(coef.denominator).items():
        exps[("p", p)] = exps.get(("p", p), 0) - k * e
    for a, x in exps.items():
        if a[0] == "p" and abs(x) * a[1].bit_length() > _MAX_BITS:
            raise _TooExpensive("power too large")
    mc, mk = _norm_mono(exps)
    return {mk: _check_bits(mc * sign)}


def _canon(ast) -> dict:
    _tick()
    op = ast[0]
    if op == "n":
        return _pconst(Fraction(ast[1], ast[2]))
    if op == "s":
        return {((("s", ast[1]), Fraction(1)),): Fraction(1)}
    if op == "c":
        return {((("c", ast[1]), Fraction(1)),): Fraction(1)}
    if op == "+":
        r: dict = {}
        for a in ast[1:]:
            r = _padd(r, _canon(a))
        return r
    if op == "*":
        parts = [_canon(a) for a in ast[1:]]
        r = _pconst(Fraction(1))
        for p in parts:
            r = _pmul(r, p)
        return r
    if op == "^":
        e = _canon(ast[2])
        ec = _as_const(e)
        if ec is not None and ec.denominator == 1 and abs(ec) > _MAX_EXPONENT:
            b = _canon(ast[1])
            bc = _as_const(b)
            if bc is None or abs(bc) not in (0, 1):
                raise _TooExpensive("exponent too large")
        b = _canon(ast[1])
        if ec is None:
            raise _Unsupported("symbolic exponent")
        return _ppow(b, ec)
    if op == "root":
        n = _as_const(_canon(ast[2]))
        x = _canon(ast[1])
        if n is None or n.denominator != 1 or n <= 0:
            raise _Unsupported("root index")
        if n > 1000:
            raise _TooExpensive("root index too large")
        return _ppow(x, Fraction(1, int(n)))
    if op == "!":
        x = _as_const(_canon(ast[1]))
        if x is None or x.denominator != 1 or x < 0:
            raise _Unsupported("factorial of a non-integer")
        if x > _MAX_FACTORIAL:
            raise _TooExpensive("factorial too large")
        return _pconst(Fraction(math.factorial(int(x))))
    if op == "binom":
        n = _as_const(_canon(ast[1]))
        k = _as_const(_canon(ast[2]))
        if n is None or k is None or n.denominator != 1 or k.denominator != 1:
            raise _Unsupported("symbolic binomial")
        if n > 20_000 or n < -20_000:
            raise _TooExpensive("binomial too large")
        if n < 0 or k < 0:
            raise _Unsupported("negative binomial")
        return _pconst(Fraction(math.comb(int(n), int(k))))
    if op == "abs":
        x = _canon(ast[1])
        c = _as_const(x)
        if c is not None:
            return _pconst(abs(c))
        if len(x) == 1:
            (key, coef), = x.items()
            if all(a[0] == "p" or a in (("c", "pi"), ("c", "E")) for a, _ in key):
                return {key: abs(coef)}
        raise _Unsupported("abs")
    if op == "f" and ast[1] in ("floor", "ceil"):
        c = _as_const(_canon(ast[2]))
        if c is None:
            raise _Unsupported("floor of a non-rational")
        return _pconst(Fraction(math.floor(c) if ast[1] == "floor" else math.ceil(c)))
    if op in ("f", "log"):
        for a in ast[2:] if op == "f" else ast[1:]:
            _canon(a)  # size checks on the arguments
        raise _Unsupported("function")
    raise _Unsupported(op)  # pragma: no cover


# ----------------------------------------------------------------------------------------------
# numeric screen (proves inequality only)
# ----------------------------------------------------------------------------------------------
def _sym_value(name: str) -> float:
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


def _numerically_different(a, b) -> bool:
    try:
        x, y = _num(a), _num(b)
    except (ArithmeticError, ValueError, TypeError, KeyError, RecursionError):
        return False
    if not all(math.isfinite(v) for v in (x.real, x.imag, y.real, y.imag)):
        return False
    scale = max(1.0, abs(x), abs(y))
    return abs(x - y) > 1e-6 * scale


def _ast_nodes(ast, limit: int) -> int:
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


# ----------------------------------------------------------------------------------------------
# sympy worker (persistent subprocess; killed and respawned on timeout)
# ----------------------------------------------------------------------------------------------
class _Deadline:
    __slots__ = ("t",)

    def __init__(self, budget: float = _TIME_BUDGET_S):
        self.t = time.monotonic() + budget

    def left(self) -> float:
        return self.t - time.monotonic()


class _armed:
    """Arm a fresh deadline of ``budget`` seconds for this thread (what _tick checks)."""

    def __init__(self, budget: float):
        self.deadline = _Deadline(budget)

    def __enter__(self) -> _Deadline:
        self.prev = getattr(_ACTIVE, "deadline", None)
        _ACTIVE.deadline = self.deadline
        return self.deadline

    def __exit__(self, *exc) -> None:
        _ACTIVE.deadline = self.prev


def _current_deadline() -> _Deadline:
    """The armed deadline, or a fresh one outside verify_math (check_gold parses without one)."""
    return getattr(_ACTIVE, "deadline", None) or _Deadline()


class _SympyWorker:
    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.owner = 0
        self.ready = False
        self.buf = b""
        self.lock = threading.Lock()
        self.stale_since: float | None = None
        self.failures = 0
        self.disabled_until = 0.0

    def _alive(self) -> bool:
        return self.proc is not None and self.owner == os.getpid() and self.proc.poll() is None

    def start(self) -> None:
        """Spawn the worker if none is running (non-blocking: sympy imports in the background)."""
        if self._alive():
            return
        if self.proc is not None and self.owner == os.getpid():
            self._kill()
        path = os.path.abspath(__file__)
        code = (
            "import sys; sys.path.pop(0); import runpy; "
            f"runpy.run_path({path!r}, run_name='__math_verifier_worker__')"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        self.owner = os.getpid()
        self.ready = False
        self.buf = b""
        self.stale_since = None

    def _kill(self) -> None:
        p = self.proc
        self.proc = None
        self.ready = False
        self.buf = b""
        self.stale_since = None
        if p is None or self.owner != os.getpid():
            return
        try:
            p.kill()
            p.wait(timeout=2)
        except Exception:
            pass
        for f in (p.stdin, p.stdout):
            try:
                f.close()  # type: ignore[union-attr]
            except Exception:
                pass

    def _readline(self, deadline: _Deadline) -> bytes:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline.left()
            if left <= 0:
                raise _Timeout()
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                raise _Timeout()
            chunk = os.read(fd, 65536)
            if not chunk:
                raise BrokenPipeError("worker exited")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def _restart(self) -> None:
        self._kill()
        self.start()  # warm replacement for the next request

    def _startup_failed(self) -> None:
        self._kill()
        self.failures += 1
        if self.failures >= 3:  # e.g. sympy missing: stop respawning for a while
            self.failures = 0
            self.disabled_until = time.monotonic() + 60.0
        else:
            self.start()

    def equal(self, a, b, deadline: _Deadline) -> bool | None:
        """True/False; None when sympy failed on the input; raises _Timeout."""
        if not self.lock.acquire(timeout=max(0.0, deadline.left())):
            raise _Timeout()
        try:
            if time.monotonic() < self.disabled_until:
                raise _Timeout()
            self.start()
            if not self.ready:
                try:
                    line = self._readline(deadline)
                except BrokenPipeError:
                    self._startup_failed()
                    raise _Timeout()
                if line != b"ready":
                    self._startup_failed()
                    raise _Timeout()
                self.ready = True
                self.failures = 0
            if self.stale_since is not None:  # drop the answer a previous caller gave up on
                try:
                    self._readline(deadline)
                    self.stale_since = None
                except _Timeout:
                    if time.monotonic() - self.stale_since > _WORKER_CALL_S:
                        self._restart()  # that request is a runaway
                    raise
                except BrokenPipeError:
                    self._restart()
                    raise _Timeout()
            full_budget = deadline.left() >= _WORKER_CALL_S
            call = _Deadline(min(_WORKER_CALL_S, max(0.0, deadline.left())))
            sent = time.monotonic()
            try:
                assert self.proc is not None and self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"a": a, "b": b}).encode() + b"\n")
                self.proc.stdin.flush()
                line = self._readline(call)
            except _Timeout:
                if full_budget:
                    self._restart()  # sympy overran its own budget: kill it
                else:
                    self.stale_since = sent  # the caller's budget ran out first: keep the worker
                raise
            except (BrokenPipeError, OSError, ValueError):
                self._restart()
                raise _Timeout()
            resp = json.loads(line)
            return resp.get("r")
        finally:
            self.lock.release()

    def shutdown(self) -> None:
        with self.lock:
            self._kill()


_WORKER = _SympyWorker()
atexit.register(_WORKER.shutdown)


def prestart_worker() -> None:
    """Start the sympy worker in the background (optional; it is started on demand anyway)."""
    try:
        if _WORKER.lock.acquire(blocking=False):
            try:
                _WORKER.start()
            finally:
                _WORKER.lock.release()
    except Exception:  # pragma: no cover
        pass


def _worker_main() -> None:  # runs in the subprocess
    try:
        import resource

        lim = 4 << 30
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    except Exception:
        pass
    ppid = os.getppid()

    def watch_parent():
        while True:
            time.sleep(0.5)
            if os.getppid() != ppid:
                os._exit(0)

    threading.Thread(target=watch_parent, daemon=True).start()
    import sympy

    def build(ast):
        op = ast[0]
        if op == "n":
            return sympy.Rational(ast[1], ast[2])
        if op == "s":
            return sympy.Symbol(ast[1])
        if op == "c":
            return {"pi": sympy.pi, "E": sympy.E, "I": sympy.I, "oo": sympy.oo}[ast[1]]
        if op == "+":
            return sympy.Add(*[build(a) for a in ast[1:]])
        if op == "*":
            return sympy.Mul(*[build(a) for a in ast[1:]])
        if op == "^":
            b, e = build(ast[1]), build(ast[2])
            if e.is_Rational and not e.is_Integer and e.q % 2 == 1 and b.is_number and b.is_negative:
                return sympy.real_root(b, e.q) ** e.p
            return sympy.Pow(b, e)
        if op == "root":
            x, n = build(ast[1]), build(ast[2])
            if n.is_Integer and int(n) % 2 == 1:
                return sympy.real_root(x, n)
            return sympy.root(x, n)
        if op == "!":
            return sympy.factorial(build(ast[1]))
        if op == "binom":
            return sympy.binomial(build(ast[1]), build(ast[2]))
        if op == "abs":
            return sympy.Abs(build(ast[1]))
        if op == "log":
            return sympy.log(build(ast[1]), build(ast[2]))
        if op == "f":
            fn = {"sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "cot": sympy.cot,
                  "sec": sympy.sec, "csc": sympy.csc, "arcsin": sympy.asin, "arccos": sympy.acos,
                  "arctan": sympy.atan, "arccot": sympy.acot, "sinh": sympy.sinh,
                  "cosh": sympy.cosh, "tanh": sympy.tanh, "ln": sympy.log, "log": sympy.log,
                  "exp": sympy.exp, "floor": sympy.floor, "ceil": sympy.ceiling}[ast[1]]
            return fn(build(ast[2]))
        raise ValueError(op)

    def equal(a, b):
        x, y = build(a), build(b)
        if x == y:
            return True
        if x.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan) or y.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
            return False
        d = x - y
        if d == 0:
            return True
        s = sympy.simplify(d)
        if s == 0:
            return True
        if s.is_number and s.is_zero is True:
            return True
        if s.is_number:
            try:
                if sympy.expand(sympy.radsimp(sympy.sqrtdenest(s))) == 0:
                    return True
            except Exception:
                pass
        return False

    try:  # warm sympy's caches so the first real request is not the slow one
        _x = sympy.Symbol("x")
        sympy.simplify((_x + 1) ** 2 / (_x + 1) - _x - 1 + sympy.sin(_x) ** 2 + sympy.cos(_x) ** 2 - 1)
        sympy.simplify(sympy.sqrt(3 + 2 * sympy.sqrt(2)) - 1 - sympy.sqrt(2))
    except Exception:
        pass
    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    for line in sys.stdin.buffer:
        try:
            req = json.loads(line)
            resp = {"r": bool(equal(req["a"], req["b"]))}
        except Exception as e:  # noqa: BLE001
            resp = {"r": None, "e": repr(e)[:200]}
        out.write(json.dumps(resp).encode() + b"\n")
        out.flush()


# ----------------------------------------------------------------------------------------------
# comparison
# ----------------------------------------------------------------------------------------------
def _pure_rational(ast) -> bool:
    stack = [ast]
    while stack:
        node = stack.pop()
        op = node[0]
        if op == "n":
            continue
        if op in ("+", "*"):
            stack.extend(node[1:])
        elif op == "^":
            stack.append(node[1])
            if node[2][0] != "n":
                stack.append(node[2])
        else:
            return False
    return True


def _scalar_equal_ast(a, b, deadline: _Deadline, ca=None, cb=None) -> bool:
    """Exact equality of two scalar ASTs; raises _TooExpensive / _Timeout."""
    if a == b:
        return True
    err_a = err_b = None
    try:
        ca = _canon(a) if ca is None else ca
    except _Undefined:
        return False
    except _Unsupported as e:
        err_a = e
    try:
        cb = _canon(b) if cb is None else cb
    except _Undefined:
        return False
    except _Unsupported as e:
        err_b = e
    if err_a is None and err_b is None:
        return ca == cb
    if _numerically_different(a, b):
        return False
    if _ast_nodes(a, _MAX_NODES) > _MAX_NODES or _ast_nodes(b, _MAX_NODES) > _MAX_NODES:
        raise _TooExpensive("expression too large for the CAS")
    r = _WORKER.equal(a, b, deadline)
    return bool(r)


def _scalar_equal(x: _Scalar, y: _Scalar, deadline: _Deadline) -> bool:
    def canon_or_none(s: _Scalar):
        try:
            return s.canon()
        except (_Unsupported, _Undefined):
            return None

    ca, cb = canon_or_none(x), canon_or_none(y)
    if _scalar_equal_ast(x.ast, y.ast, deadline, ca, cb):
        return True
    if x.pct != y.pct:
        # 50% = 50 and 50% = 0.5
        p, q = (x, y) if x.pct else (y, x)
        cp, cq = (ca, cb) if x.pct else (cb, ca)
        cs = _pmul(cp, _pconst(Fraction(1, 100))) if cp is not None else None
        return _scalar_equal_ast(["*", p.ast, ["n", 1, 100]], q.ast, deadline, cs, cq)
    return False


def _unordered_equal(xs: list, ys: list, deadline: _Deadline) -> bool:
    # sets: every element of one matches an element of the other (duplicates collapse)
    for a in xs:
        if not any(_values_equal(a, b, deadline) for b in ys):
            return False
    for b in ys:
        if not any(_values_equal(a, b, deadline) for a in xs):
            return False
    return True


def _values_equal(a: tuple, g: tuple, deadline: _Deadline) -> bool:
    _tick()
    ka, kg = a[0], g[0]
    if ka == "scalar" and kg == "scalar":
        return _scalar_equal(a[1], g[1], deadline)
    if ka == "text" or kg == "text":
        if ka == kg:
            return a[1] == g[1]
        other = g if ka == "text" else a
        if other[0] == "scalar":
            return _text_norm(other[1].text) == (a[1] if ka == "text" else g[1])
        return False
    if ka in ("list", "set") and kg in ("list", "set"):
        return _unordered_equal(a[1], g[1], deadline)
    if ka == "set" and len(a[1]) == 1 and kg not in ("seq", "union", "matrix"):
        return _values_equal(a[1][0], g, deadline)
    if kg == "set" and len(g[1]) == 1 and ka not in ("seq", "union", "matrix"):
        return _values_equal(a, g[1][0], deadline)
    if ka == "seq" and kg == "seq":
        return (a[1], a[2]) == (g[1], g[2]) and len(a[3]) == len(g[3]) and all(
            _values_equal(x, y, deadline) for x, y in zip(a[3], g[3])
        )
    if {ka, kg} == {"list", "seq"}:
        lst, seq = (a, g) if ka == "list" else (g, a)
        if (seq[1], seq[2]) != ("(", ")") or len(lst[1]) != len(seq[3]):
            return False
        pairs = zip(a[1], g[3]) if ka == "list" else zip(a[3], g[1])
        return all(_values_equal(x, y, deadline) for x, y in pairs)
    if ka == "union" and kg == "union":
        return _unordered_equal(a[1], g[1], deadline)
    if ka == "matrix" and kg == "matrix":
        return len(a[1]) == len(g[1]) and all(
            len(r1) == len(r2) and all(_values_equal(x, y, deadline) for x, y in zip(r1, r2))
            for r1, r2 in zip(a[1], g[1])
        )
    if {ka, kg} == {"matrix", "seq"}:
        mat, seq = (a, g) if ka == "matrix" else (g, a)
        flat = [c for r in mat[1] for c in r]
        if (len(mat[1]) == 1 or all(len(r) == 1 for r in mat[1])) and (seq[1], seq[2]) == ("(", ")"):
            return len(flat) == len(seq[3]) and all(_values_equal(x, y, deadline) for x, y in zip(flat, seq[3]))
        return False
    if ka == "eq" and kg == "eq":
        x, y = a[1], g[1]
        if _scalar_equal(x, y, deadline):
            return True
        neg = _Scalar(["*", _MINUS_ONE, y.ast])
        return _scalar_equal(x, neg, deadline)
    if ka == "ratio" and kg == "ratio":
        (a1, a2), (g1, g2) = a[1], g[1]
        if _scalar_equal(a1, g1, deadline) and _scalar_equal(a2, g2, deadline):
            return True
        # proportional: a1 * g2 == a2 * g1 (both sides nonzero)
        return _scalar_equal(_Scalar(["*", a1.ast, g2.ast]), _Scalar(["*", a2.ast, g1.ast]), deadline) and not (
            _scalar_equal(a2, _Scalar(["n", 0, 1]), deadline) or _scalar_equal(g2, _Scalar(["n", 0, 1]), deadline)
        )
    if ka == "rel" and kg == "rel":
        return a[1] == g[1] and len(a[2]) == len(g[2]) and all(
            _scalar_equal(x, y, deadline) for x, y in zip(a[2], g[2])
        )
    return False


def _is_hedged(boxes: list, thousands: bool, deadline: _Deadline) -> bool:
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
                last_val = _parse_value(last, thousands)
            if not _values_equal(_parse_value(other, thousands), last_val, deadline):
                return True
        except (_Unparsable, _TooExpensive, _Unsupported, _Undefined):
            return True
    return False


# ----------------------------------------------------------------------------------------------
# gold handling
# ----------------------------------------------------------------------------------------------
@lru_cache(maxsize=8192)
def _gold_cached(gold: str) -> tuple:
    """("ok", value, cleaned, fastfrac|None) or ("err", reason, message)."""
    if not gold.strip():
        return ("err", "empty_gold", "gold answer is empty")
    m = _SIMPLE_NUM_RE.match(gold)
    if m:
        v = Fraction(m.group(2))
        if m.group(1) == "-":
            v = -v
        return ("ok", ("scalar", _Scalar(_nfrac(v))), None, v)
    thousands = bool(_THOUSANDS_WHOLE_RE.match(gold.strip()))
    try:
        cleaned = _clean(gold, thousands)
        value = _parse_value(gold, thousands)
    except _Unparsable as e:
        return ("err", "unparsable_gold", str(e))
    except _TooExpensive as e:
        return ("err", "too_expensive", str(e))
    except RecursionError:
        return ("err", "too_expensive", "nested too deeply")
    if not _pure_value(value):
        prestart_worker()
    return ("ok", value, cleaned, None)


def _pure_value(v: tuple) -> bool:
    if v[0] == "scalar":
        return _pure_rational(v[1].ast)
    return v[0] == "text"


def check_gold(gold: str) -> None:
    """Raise GoldAnswerError (naming the gold string) if the gold answer cannot be parsed."""
    if not isinstance(gold, str):
        raise GoldAnswerError(f"gold answer {gold!r} is not a string")
    r = _gold_cached(gold)
    if r[0] == "err" and r[1] in ("empty_gold", "unparsable_gold"):
        raise GoldAnswerError(f"cannot parse gold answer {gold!r}: {r[2]}")


# ----------------------------------------------------------------------------------------------
# verify
# ----------------------------------------------------------------------------------------------
def verify_math(response: str, gold: str) -> Verdict:
    """Score one response against a gold answer.  Never raises; one deadline (_TIME_BUDGET_S) covers
    the whole call: extraction, parsing, every box and the comparison (``timeout`` when it runs out)."""
    found: list[str] = []  # the extracted answer, reported with every verdict once known
    try:
        with _armed(_TIME_BUDGET_S) as deadline:
            return _verify(response, gold, deadline, found)
    except _TooExpensive:
        reason = "too_expensive"
    except RecursionError:
        reason = "too_expensive"
    except _Timeout:
        reason = "timeout"
    except _Hedged:
        reason = "hedged"
    except Exception:  # _Unparsable, and never raise into a trainer
        reason = "unparsable_response"
    return Verdict(0.0, reason, found[0] if found else None)


def _verify(response, gold, deadline: _Deadline, found: list) -> Verdict:
    if not isinstance(gold, str):
        gold = "" if gold is None or isinstance(gold, bool) else str(gold)
    if not isinstance(response, str):
        response = "" if response is None else str(response)
    g = _gold_cached(gold)
    boxes, reason = _extract_boxes(response)
    answer = None
    if boxes and boxes[-1] is not None and boxes[-1].strip():
        answer = boxes[-1]
        found.append(answer)
    if g[0] == "err":
        return Verdict(0.0, g[1], answer)
    if reason is not None:
        return Verdict(0.0, reason, answer)
    assert answer is not None
    gval, gclean, gfrac = g[1], g[2], g[3]
    # fast path: a plain number against a plain-number gold
    if gfrac is not None and len(boxes) == 1 and len(answer) <= 100:
        m = _SIMPLE_NUM_RE.match(answer)
        if m:
            v = Fraction(m.group(2))
            if m.group(1) == "-":
                v = -v
            return Verdict(1.0 if v == gfrac else 0.0, "match" if v == gfrac else "mismatch", answer)
    thousands = gval[0] == "scalar"
    if len(boxes) > 1 and _is_hedged(boxes, thousands, deadline):
        return Verdict(0.0, "hedged", answer)
    if gclean is not None and _clean(answer, thousands) == gclean:
        return Verdict(1.0, "match", answer)
    aval = _parse_value(answer, thousands)
    if aval[0] == "list" and gval[0] in ("scalar", "text") and _OR_RE.search(answer):
        return Verdict(0.0, "hedged", answer)  # "5 or 6" for a single-valued gold
    ok = _values_equal(aval, gval, deadline)
    return Verdict(1.0 if ok else 0.0, "match" if ok else "mismatch", answer)


_MAX_LINE_BYTES = 16 << 20  # one input line; a longer one is reported bad_input, not read whole


def verify_stream(lines: Iterable[str | bytes] | BinaryIO | TextIO, out: TextIO | BinaryIO) -> dict:
    """Read JSON lines {"response": ..., "answer": ...}; write one JSON verdict line per non-blank
    input line, flushed.  Never raises on the input: a line that is not valid UTF-8, not a JSON
    object with both keys, or too long gets {"reason": "bad_input", "error": ...}.  The output is
    valid UTF-8 (a lone surrogate from a JSON escape is written as U+FFFD); a binary ``out`` gets
    UTF-8 bytes whatever the locale.  Returns {"lines", "bad_input", "bad_lines" (first 20)}."""
    from posttrain.rewards.verify_cli import check_math, verify_lines  # the loop every verify kind shares

    prestart_worker()
    return verify_lines(lines, out, check_math, max_line_bytes=_MAX_LINE_BYTES)


if __name__ == "__math_verifier_worker__":
    _worker_main()
elif __name__ == "__main__":
    sys.exit(1 if verify_stream(sys.stdin.buffer, sys.stdout.buffer)["bad_input"] else 0)
