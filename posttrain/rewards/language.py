"""Language consistency (DeepSeek-R1, sec. 2.3.2): the share of the reasoning's words that are in
the prompt's target language. LaTeX's math commands (`\boxed`, `\frac`, ...: a closed list, so English words
written as commands still count) are markup, not words. CJK ideographs count as one word each; runs of Latin letters as words;
runs of letters of any other script (Cyrillic, Greek, kana, Hangul, Arabic, ...) as words of neither
target, so they lower either share; digits and symbols are neutral. Text is read after NFKC
(fullwidth Latin is Latin). Script, not language: French passes as `en` (no language-ID model)."""
from __future__ import annotations

import re
import unicodedata

LANGUAGE_VERSION = "language/5"   # LaTeX math commands are not Latin words ("答案是\\boxed{3}" is Chinese)
CJK_CLASS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"   # CJK ideographs (a character class body)
_LATIN_CLASS = "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff"
_CJK = re.compile(f"[{CJK_CLASS}]")
_LATIN_WORD = re.compile(f"[{_LATIN_CLASS}]+")
_MATH_COMMAND = re.compile(
    r"\\(?:boxed|d?frac|tfrac|sqrt|times|div|cdot|cdots|ldots|dots|pm|mp|le|leq|ge|geq|ne|neq|approx|equiv|"
    r"pi|theta|alpha|beta|gamma|delta|lambda|mu|sigma|omega|infty|left|right|circ|angle|degree|sum|prod|int|"
    r"log|ln|sin|cos|tan|overline|mathrm|mathbf|quad|qquad)(?![A-Za-z])")
_OTHER_WORD = re.compile(f"(?:(?![{_LATIN_CLASS}{CJK_CLASS}])[^\\W\\d_])+")


def word_counts(text: str) -> tuple[int, int, int]:
    """(Latin words, CJK characters, words of other scripts)"""
    text = _MATH_COMMAND.sub(" ", unicodedata.normalize("NFKC", text))
    return len(_LATIN_WORD.findall(text)), len(_CJK.findall(text)), len(_OTHER_WORD.findall(text))


def language_share(text: str, target: str) -> float | None:
    """Share of words in `target` ('en' or 'zh'); None when the text has no words at all."""
    latin, cjk, other = word_counts(text)
    total = latin + cjk + other
    if total == 0:
        return None
    return (cjk if target == "zh" else latin) / total
