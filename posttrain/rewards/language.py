"""Language consistency (DeepSeek-R1, sec. 2.3.2): the share of the reasoning's words that are in
the prompt's target language. CJK characters count as one word each; Latin letter runs as words;
digits and symbols are neutral."""
from __future__ import annotations

import re

LANGUAGE_VERSION = "language/1"
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z]+")


def word_counts(text: str) -> tuple[int, int]:
    """(latin words, CJK characters)"""
    return len(_LATIN_WORD.findall(text)), len(_CJK.findall(text))


def language_share(text: str, target: str) -> float | None:
    """Share of words in `target` ('en' or 'zh'); None when the text has no words at all."""
    latin, cjk = word_counts(text)
    total = latin + cjk
    if total == 0:
        return None
    return (cjk if target == "zh" else latin) / total
