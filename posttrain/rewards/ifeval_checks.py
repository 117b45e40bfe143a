"""The checker layer for the rest of IFEval's instructions: constraint types beside those of
posttrain.rewards.instruction (which registers them), their parameters, and the IFEval ids that map
onto them, so that all 25 of IFEval's ids are verified.

Each checker keeps the reference's meaning (posttrain.rewards.ifeval_reference) and reads the reply
the way the instruction checkers do: as rendered (HTML comments and tags, which a reader never sees,
do not count), counts conservative in the limit's direction (a count has a low reading, what surely
is there, and a high one, every spelling that may read as it; "at least" reads the low one, "less
than" / "at most" the high one, "exactly" / "around" both), and no constraint met vacuously (a
highlighted section, a bullet, a paragraph, a section, a title, a postscript or a placeholder holds
a word; two responses differ beyond case and spacing; a repeated prompt is followed by an answer).
Whether a reply that meets them deserves the reward stays the guard layer's question.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Any, Callable

from posttrain.rewards.instruction_text import _CJK, _LETTERS, _language, _real_word, _readings, _unmarked, fold_text
from posttrain.rewards.ifeval_reference import CONSTRAINED_OPTIONS, detect_language, sentences

RELATIONS = ("less than", "at least", "at most", "exactly", "around")
# langdetect's codes (its 55 profiles): what `language:response_language` may ask for.
DETECTED_LANGUAGES = tuple("""af ar bg bn ca cs cy da de el en es et fa fi fr gu he hi hr hu id it ja kn ko lt lv mk ml
mr ne nl no pa pl pt ro ru sk sl so sq sv sw ta te th tl tr uk ur vi zh""".split())


# ---------------------------------------------------------------- reading a reply

def _seen(answer: str) -> str:
    """The reply as a reader sees it, in one spelling: rendered, then folded (`fold_text`)."""
    return fold_text(_unmarked(answer))


def _has_words(text: str) -> bool:
    """A real word (`instruction._real_word`: not "zzz", "xq" or "aAaA") or an ideograph."""
    return any(_CJK.search(run) or _real_word(run) for run in _LETTERS.findall(text))


def _bounds(c: dict) -> tuple[float, float]:
    """The counts a relation allows, inclusive: "less than 5" is (0, 4), "around 10" (9, 11)."""
    n, relation = c["count"], c["relation"]
    tolerance = c.get("tolerance", max(round(n * 0.1), 1))
    return {"less than": (0, n - 1), "at most": (0, n), "at least": (n, float("inf")), "exactly": (n, n),
            "around": (n - tolerance, n + tolerance)}[relation]


def _within(low: int, high: int, c: dict) -> bool:
    """The low reading meets the lower bound and the high reading the upper one."""
    least, most = _bounds(c)
    return low >= least and high <= most


def _word_starts(word: str, text: str) -> int:
    return len(re.findall(rf"(?<!\w){re.escape(fold_text(word).strip())}", text))


# ---------------------------------------------------------------- keywords and letters

def _keywords(answer: str, c: dict) -> bool:
    seen = _seen(answer)
    return all(_word_starts(w, seen) for w in c["words"])


def _keyword_frequency(answer: str, c: dict) -> bool:
    high = max(_word_starts(c["value"], r) for r in _readings(answer))
    return _within(_word_starts(c["value"], _seen(answer)), high, c)


def _letter_frequency(answer: str, c: dict) -> bool:
    letter = c["letter"].casefold()
    low = sum(run.count(letter) for run in _LETTERS.findall(_seen(answer)) if _real_word(run))
    return _within(low, max(r.count(letter) for r in _readings(answer)), c)


def _capital_words(answer: str, c: dict) -> bool:
    text = unicodedata.normalize("NFKC", _unmarked(answer))
    runs = [r for r in _LETTERS.findall(text) if not _CJK.search(r)]
    low = sum(1 for r in runs if len(r) > 1 and r.isupper() and len(set(r)) > 1)
    high = sum(1 for r in runs if r.isupper())   # "DON'T" two, as NLTK's tokens are (DO, N'T), "U.S." two
    return _within(low, high, c)


# ---------------------------------------------------------------- language

def in_language(answer: str, c: dict) -> bool:
    """`language`: en and zh by script share (`instruction._language`), and by langdetect as well
    where the constraint says `detect` (IFEval's rule); any other code by langdetect alone, on the
    lower-cased prose (capitals mislead it), seeded: a text it cannot read is in no language."""
    code = c["language"]
    if code in ("en", "zh") and not _language(answer, c):
        return False
    if code in ("en", "zh") and not c.get("detect"):
        return True
    found = detect_language(_unmarked(answer).lower())
    return found is not None and found.split("-")[0] == code


# ---------------------------------------------------------------- length and layout

def _lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.strip()]


def _sentences(answer: str, c: dict) -> bool:
    text = _unmarked(answer)
    low = sum(1 for s in sentences(text) if _has_words(s))
    high = sum(max(1, len(sentences(line))) for line in _lines(text) if re.search(r"\w", line))
    return _within(low, max(high, len(sentences(text))), c)


_DIVIDER = re.compile(r"^[ \t]*\*[ \t]*\*[ \t]*\*[ \t*]*$", re.MULTILINE)


def _parts_with_words(parts: list[str]) -> int | None:
    """How many parts hold words; None if an inner one is empty or without words (the first and
    last may be empty: a divider before or after everything)."""
    while parts and not parts[0].strip():
        parts = parts[1:]
    while parts and not parts[-1].strip():
        parts = parts[:-1]
    return len(parts) if all(_has_words(p) for p in parts) else None


def _paragraphs(answer: str, c: dict) -> bool:
    return _parts_with_words(_DIVIDER.split(_unmarked(answer))) == c["count"]


_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_LEAD = re.compile(r"^[\s#>*_~`\"'“‘(\[-]+")


def _first_word(paragraph: str) -> str:
    words = _LEAD.sub("", paragraph).split()
    return fold_text(re.split(r"[^\w-]", words[0])[0]) if words else ""


def _paragraph_first_word(answer: str, c: dict) -> bool:
    paragraphs = [p for p in _BLANK_LINE.split(_unmarked(answer)) if p.strip()]
    if len(paragraphs) != c["count"] or not all(_has_words(p) for p in paragraphs) or c["nth"] > len(paragraphs):
        return False
    return _first_word(paragraphs[c["nth"] - 1]) == fold_text(c["value"]).strip()


def _placeholders(answer: str, c: dict) -> bool:
    return len(re.findall(r"\[[^\[\]\n]*\w[^\[\]\n]*\](?!\()", _unmarked(answer))) >= c["count"]


def _postscript(answer: str, c: dict) -> bool:
    marker = r"\.?\s?".join(re.escape(part) for part in c["marker"].strip().rstrip(".").split("."))
    text = _unmarked(answer)
    for m in re.finditer(rf"^[ \t>*_#]*{marker}\.?(?![^\W\d_])", text, re.IGNORECASE | re.MULTILINE):
        if _has_words(text[m.end():]):
            return True
    return False


_BULLET = re.compile(r"^[ \t]*[*-](?:[ \t]+(.*))?$", re.MULTILINE)   # "* item", "- item"; not "---" or "-5"


def _bullets(answer: str, c: dict) -> bool:
    items = [m.group(1) or "" for m in _BULLET.finditer(_unmarked(answer))]
    return len(items) == c["count"] and all(_has_words(item) for item in items)


def _said(option: str, text: str) -> bool:
    """`option` in `text` as words: "A" is not in "Apple", "a)" not in "data)"."""
    target = fold_text(option).strip()
    return bool(re.search((r"(?<!\w)" if re.match(r"\w", target) else "") + re.escape(target) +
                          (r"(?!\w)" if re.search(r"\w$", target) else ""), text))


def _constrained(answer: str, c: dict) -> bool:
    seen = fold_text(_unmarked(answer))
    return sum(1 for option in c.get("options") or CONSTRAINED_OPTIONS if _said(option, seen)) == 1


def _highlights(answer: str, c: dict) -> bool:
    spans = re.findall(r"\*\*([^\n*]+)\*\*|\*([^\n*]+)\*", _unmarked(answer))
    return sum(1 for double, single in spans if _has_words(double or single)) >= c["count"]


def _sections(answer: str, c: dict) -> bool:
    header = re.compile(rf"^[ \t#*_>]*{re.escape(c['splitter'].strip())}\s?(\d+)", re.MULTILINE)
    text = _unmarked(answer)
    found = list(header.finditer(text))
    bodies = [text[m.end():nxt.start() if nxt else len(text)] for m, nxt in zip(found, [*found[1:], None])]
    numbers = {m.group(1) for m, body in zip(found, bodies) if _has_words(body)}
    return len(numbers) >= c["count"]


def _uncommented(text: str) -> str:
    """The text without HTML comments (`<<title>>` reads as a tag to `_unmarked`, so only these go)."""
    parts, pos = [], 0
    while (start := text.find("<!--", pos)) >= 0:
        parts.append(text[pos:start])
        end = text.find("-->", start + 4)
        pos = len(text) if end < 0 else end + 3
    return "".join(parts) + text[pos:]


def _title(answer: str, c: dict) -> bool:
    return any(_has_words(_unmarked(t)) for t in re.findall(r"<<([^\n<>]+)>>", _uncommented(answer)))


def _two_responses(answer: str, c: dict) -> bool:
    parts = [p for p in _unmarked(answer).split("******")]
    if _parts_with_words(parts) != 2:
        return False
    first, second = (" ".join(fold_text(p).split()) for p in parts if p.strip())
    return first != second


def split_repeat(answer: str, c: dict) -> str | None:
    """The reply after the repeated prompt (case and spacing aside), or None if it does not open with it."""
    words = c["prompt"].split()
    m = re.match(r"\s*" + r"\s+".join(map(re.escape, words)), answer, re.IGNORECASE) if words else None
    return answer[m.end():] if m else None


def _repeat_prompt(answer: str, c: dict) -> bool:
    rest = split_repeat(answer, c)
    return rest is not None and _has_words(_unmarked(rest))


def _quotation(answer: str, c: dict) -> bool:
    body = answer.strip()
    return len(body) > 1 and body[0] == '"' and body[-1] == '"' and _has_words(_unmarked(body[1:-1]))


CHECKS: dict[str, Callable[[str, dict], bool]] = {
    "keywords": _keywords, "keyword_frequency": _keyword_frequency, "letter_frequency": _letter_frequency,
    "capital_words": _capital_words, "sentences": _sentences, "paragraphs": _paragraphs,
    "paragraph_first_word": _paragraph_first_word, "placeholders": _placeholders, "postscript": _postscript,
    "bullets": _bullets, "constrained_response": _constrained, "highlights": _highlights, "sections": _sections,
    "title": _title, "two_responses": _two_responses, "repeat_prompt": _repeat_prompt, "quotation": _quotation,
    "language": in_language,
}
# Text a constraint dictates at the reply's start: not content (`instruction._content`).
DICTATED_SPLITS = {"repeat_prompt": split_repeat}


# ---------------------------------------------------------------- parameters

def _count(value: Any, least: int = 1) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        return f"must be a whole number of at least {least}, got {value!r}"
    return None


def _text(value: Any) -> str | None:
    return None if isinstance(value, str) and fold_text(value).strip() else f"must be a non-empty string, got {value!r:.100}"


def _word(value: Any) -> str | None:
    return _text(value) or (None if re.search(r"[^\W\d_]", value) else f"must hold a letter, got {value!r:.100}")


def _texts(value: Any) -> str | None:
    if not isinstance(value, list) or not value:
        return f"must be a non-empty list of strings, got {value!r:.100}"
    return next((f"has an empty item {v!r:.100}" for v in value if _text(v)), None)


def _letter(value: Any) -> str | None:
    ok = isinstance(value, str) and len(value.strip()) == 1 and value.strip().isascii() and value.strip().isalpha()
    return None if ok else f"must be one letter a-z, got {value!r:.100}"


def _relation(value: Any) -> str | None:
    return None if value in RELATIONS else f"must be one of {', '.join(RELATIONS)}, got {value!r:.100}"


def _language_code(value: Any) -> str | None:
    return None if value in DETECTED_LANGUAGES else f"unknown language code {value!r:.50}; known: {', '.join(DETECTED_LANGUAGES)}"


def _share(value: Any) -> str | None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value <= 1
    return None if ok else f"must be a number in (0, 1], got {value!r}"


_KINDS: dict[str, Callable[[Any], str | None]] = {
    "count": _count, "count0": lambda v: _count(v, 0), "text": _text, "word": _word, "texts": _texts, "letter": _letter,
    "relation": _relation, "language": _language_code, "share": _share,
    "flag": lambda v: None if isinstance(v, bool) else f"must be true or false, got {v!r:.50}",
}
_RELATIONAL = {"relation": "relation", "count": "count", "tolerance?": "count0"}
# type -> {parameter: kind}; a trailing "?" marks an optional parameter.
SPECS: dict[str, dict[str, str]] = {
    "keywords": {"words": "texts"},
    "keyword_frequency": {"value": "text", **_RELATIONAL},
    "letter_frequency": {"letter": "letter", **_RELATIONAL},
    "capital_words": dict(_RELATIONAL),
    "sentences": dict(_RELATIONAL),
    "paragraphs": {"count": "count"},
    "paragraph_first_word": {"count": "count", "nth": "count", "value": "text"},
    "placeholders": {"count": "count"},
    "postscript": {"marker": "word"},
    "bullets": {"count": "count"},
    "constrained_response": {"options?": "texts"},
    "highlights": {"count": "count"},
    "sections": {"splitter": "word", "count": "count"},
    "title": {}, "two_responses": {}, "quotation": {},
    "repeat_prompt": {"prompt": "text"},
    "language": {"language": "language", "min_share?": "share", "detect?": "flag"},
}


def _validator(spec: dict[str, str]) -> Callable[[dict], str | None]:
    def check(c: dict) -> str | None:
        for name, kind in spec.items():
            key = name.rstrip("?")
            if c.get(key) is None:
                if name.endswith("?") and key not in c:
                    continue
                return f"needs `{key}`"
            problem = _KINDS[kind](c[key])
            if problem:
                return f"`{key}` {problem}"
        if c.get("nth", 0) > c.get("count", 0) and "nth" in c:
            return f"`nth` {c['nth']} is past the {c['count']} paragraphs"
        return None
    return check


PARAMETERS = {name: (tuple(k.rstrip("?") for k in spec), _validator(spec)) for name, spec in SPECS.items()}


# ---------------------------------------------------------------- IFEval ids onto constraints

def _relational(kind: str, count: str, relation: str, **extra) -> Callable[[dict], dict]:
    return lambda kw: {"type": kind, **{k: kw.get(v) for k, v in extra.items()}, "relation": kw.get(relation),
                       "count": kw.get(count)}


def _english(case: str) -> Callable[[dict], list[dict]]:
    return lambda kw: [{"type": case}, {"type": "language", "language": "en", "detect": True}]


IFEVAL_IDS: dict[str, Callable[[dict], dict | list[dict]]] = {
    "keywords:existence": lambda kw: {"type": "keywords", "words": kw.get("keywords")},
    "keywords:frequency": _relational("keyword_frequency", "frequency", "relation", value="keyword"),
    "keywords:letter_frequency": _relational("letter_frequency", "let_frequency", "let_relation", letter="letter"),
    "language:response_language": lambda kw: {"type": "language", "language": kw.get("language"), "detect": True},
    "length_constraints:number_sentences": _relational("sentences", "num_sentences", "relation"),
    "length_constraints:number_paragraphs": lambda kw: {"type": "paragraphs", "count": kw.get("num_paragraphs")},
    "length_constraints:nth_paragraph_first_word": lambda kw: {
        "type": "paragraph_first_word", "count": kw.get("num_paragraphs"), "nth": kw.get("nth_paragraph"),
        "value": kw.get("first_word")},
    "detectable_content:number_placeholders": lambda kw: {"type": "placeholders", "count": kw.get("num_placeholders")},
    "detectable_content:postscript": lambda kw: {"type": "postscript", "marker": kw.get("postscript_marker")},
    "detectable_format:number_bullet_lists": lambda kw: {"type": "bullets", "count": kw.get("num_bullets")},
    "detectable_format:constrained_response": lambda kw: {"type": "constrained_response"},
    "detectable_format:number_highlighted_sections": lambda kw: {"type": "highlights", "count": kw.get("num_highlights")},
    "detectable_format:multiple_sections": lambda kw: {"type": "sections", "splitter": kw.get("section_spliter"),
                                                       "count": kw.get("num_sections")},
    "detectable_format:title": lambda kw: {"type": "title"},
    "combination:two_responses": lambda kw: {"type": "two_responses"},
    "combination:repeat_prompt": lambda kw: {"type": "repeat_prompt", "prompt": kw.get("prompt_to_repeat")},
    "change_case:capital_word_frequency": _relational("capital_words", "capital_frequency", "capital_relation"),
    "change_case:english_capital": _english("uppercase"),
    "change_case:english_lowercase": _english("lowercase"),
    "startend:quotation": lambda kw: {"type": "quotation"},
}


def register(checks: dict, parameters: dict, ifeval_ids: dict, splits: dict) -> None:
    """Adds this module's types, parameters, IFEval ids and dictated openings to instruction's tables."""
    checks.update(CHECKS)
    parameters.update(PARAMETERS)
    ifeval_ids.update(IFEVAL_IDS)
    splits.update(DICTATED_SPLITS)
