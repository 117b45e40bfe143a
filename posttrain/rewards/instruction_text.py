"""How instruction checks read a reply's text: its words and tokens, counted conservatively in the
limit's direction, and every spelling that reads as a word (`_readings`: HTML entities, markup,
hyphens, spaced letters, leetspeak, homoglyphs, invisible characters). Shared by the checks of
posttrain.rewards.instruction and IFEval's in posttrain.rewards.ifeval_checks."""

import html
import json
import re
import unicodedata
import urllib.parse
from functools import cache

from confusable_homoglyphs.confusables import confusables_data
from opencc import OpenCC

from posttrain.rewards.language import CJK_CLASS, language_share

_CJK = re.compile(f"[{CJK_CLASS}]")
_TOKEN = re.compile(f"[{CJK_CLASS}]|(?:(?![{CJK_CLASS}])[^\\W\\d_])+|\\d+(?:[.,]\\d+)*")
# Special tokens (`<|im_end|>`, `<|endoftext|>`) and tag-like markers (`<think>`, `</s>`, `<unk>`).
_SPECIAL = re.compile(r"<\|[^<>|\s]{1,40}\|>|</?[A-Za-z][\w-]{0,30}>")
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")


def _prose(text: str) -> str:
    """The text without special tokens, tags and LaTeX commands (`\\boxed` is markup, not words)."""
    return _LATEX_COMMAND.sub(" ", _SPECIAL.sub(" ", unicodedata.normalize("NFKC", text)))


def tokens(text: str) -> list[str]:
    """The reply's words and numbers (NFKC, case-folded), markup left out (`_prose`)."""
    return [t.casefold() for t in _TOKEN.findall(_prose(text))]


_KANA_HANGUL = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uac00-\ud7af\uff66-\uff9f]")
_LETTER_RUN = re.compile(f"(?:(?![{CJK_CLASS}])[^\\W\\d_])+")


def count_words(text: str) -> int:
    """The count for "at most N words", conservative in that direction: CJK characters count one
    word each, kana and Hangul one per syllable, every number one, and a run of letters as many
    words as it may hold glued (`instruction_guard.glued_parts`: "TheAnswerIsFive" four,
    "theansweris" three), so a word-count limit cannot be met by gluing words."""
    from posttrain.rewards.instruction_words import glued_parts

    prose = _prose(text)
    glued = sum(glued_parts(run) - 1 for run in _LETTER_RUN.findall(prose))
    syllables = _KANA_HANGUL.findall(prose)
    runs = len(re.findall(f"(?:{_KANA_HANGUL.pattern})+", prose))
    return len(tokens(text)) + glued + len(syllables) - runs


_GLUED_DIGITS = re.compile(rf"(?![{CJK_CLASS}])[^\W\d_]\d|\d(?![{CJK_CLASS}])[^\W\d_]")
_LATIN_RUN, _LETTERS = re.compile(r"[A-Za-z]+"), re.compile(r"[^\W\d_]+")
_GARBLED_CASE = re.compile(r"[a-z][A-Z](?![a-z])|[A-Z]{2}[a-z]{2}")


def _real_word(run: str) -> bool:
    """Two or more letters, not one letter repeated ("aAaA"), with a vowel when Latin ("xq" is not
    text) and case only where words carry it ("PDFs", never "aB"); or the one-letter "a" and "I"."""
    folded = run.casefold()
    if len(run) < 2:
        return folded in ("a", "i")
    if len(set(folded)) == 1:
        return False
    if _LATIN_RUN.fullmatch(run):
        return any(v in folded for v in "aeiouy") and not _GARBLED_CASE.search(run)
    return True


def count_real_words(text: str, enough: int | None = None) -> int:
    """The count for "at least N words", conservative in that direction: only real words in spans
    that read as prose (`instruction_guard.prose_words`), counting stopped at `enough`."""
    from posttrain.rewards.instruction_words import prose_words

    return prose_words(_prose(text), enough)


def _json_body(answer: str) -> str:
    """The reply without a Markdown code fence around it (string operations: a regex over a long
    whitespace run backtracks quadratically)."""
    body = answer.strip()
    if body.startswith("```"):
        body = body[3:]
        body = body[4:] if body.startswith("json") else body
    if body.endswith("```"):
        body = body[:-3]
    return body.strip()


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")   # json.loads accepts NaN and Infinity; the JSON standard does not


def _unique_keys(pairs: list) -> dict:
    if len({key for key, _ in pairs}) < len(pairs):   # {"answer": 30, "answer": 29}: two answers, one read
        raise ValueError("a JSON object repeats a key")
    return dict(pairs)


def _load_json(answer: str):
    return json.loads(_json_body(answer), parse_constant=_no_constant, object_pairs_hook=_unique_keys)


# ---------------------------------------------------------------- folding for forbidden words

@cache
def _skeleton_table() -> dict[int, str]:
    """Non-ASCII characters that Unicode's confusables data (UTS #39, via confusable_homoglyphs)
    lists as look-alikes of one ASCII letter: Cyrillic "а", Greek "ο", ... Only mapped onto ASCII
    letters, and never ASCII onto ASCII, so ordinary words ("modern", "l1") are not merged."""
    table = {}
    for ch, glyphs in confusables_data.items():
        if len(ch) != 1 or ch.isascii():
            continue
        latin = [g["c"] for g in glyphs if len(g["c"]) == 1 and g["c"].isascii() and g["c"].isalpha()]
        if latin:
            table[ord(ch)] = latin[0]
    return table


@cache
def _simplified_table() -> dict[int, str]:
    """Traditional to simplified Chinese character by character (OpenCC's t2s, read once): a
    translate table is linear and fast, where OpenCC over a long reply takes seconds."""
    chars = [chr(c) for lo, hi in ((0x3400, 0x4DC0), (0x4E00, 0xA000), (0xF900, 0xFB00)) for c in range(lo, hi)]
    simplified = OpenCC("t2s").convert("\n".join(chars)).split("\n")
    return {ord(a): b for a, b in zip(chars, simplified, strict=True) if a != b}


@cache
def _ignorable_table() -> dict[int, None]:
    """Zero-width and other invisible format characters (joiners, soft hyphen, bidi controls),
    variation selectors, combining marks and Hangul fillers: deleted by `str.translate`."""
    codes = [c for lo, hi in ((0, 0x20000), (0xE0000, 0xE1000)) for c in range(lo, hi)
             if unicodedata.category(chr(c)) in ("Cf", "Mn", "Me")]
    codes += [*range(0xFE00, 0xFE10), 0x115F, 0x1160, 0x3164, 0xFFA0]
    return dict.fromkeys(codes)


_CJK_GAP = re.compile(f"(?<=[{CJK_CLASS}])\\s+(?=[{CJK_CLASS}])")


@cache
def _small_capitals() -> dict[int, str]:
    """Small-capital letters (ᴀ ɴ ʀ, "LATIN LETTER SMALL CAPITAL A"), which NFKC keeps and the
    confusables data does not map: to their lower-case letter."""
    table = {}
    for code in (*range(0x0250, 0x02B0), *range(0x1D00, 0x1D80), *range(0xA730, 0xA800)):
        name = unicodedata.name(chr(code), "")
        if name.startswith("LATIN LETTER SMALL CAPITAL ") and len(name.rsplit(" ", 1)[1]) == 1:
            table[code] = name[-1].lower()
    return table


# Emphasis marks and separators a reply can put inside a word without changing how it reads:
# "**ans**wer", "an_swer", "答·案".
_INSIDE_WORD = re.compile(r"(?<=\w)[*_~`·‧・•∙⋅]+(?=\w)")


def fold_text(text: str) -> str:
    """One spelling for text that looks or reads the same: NFKC (fullwidth and styled letters),
    invisible characters and accents removed, confusable letters and small capitals to their Latin
    skeleton, emphasis marks and middle dots inside a word dropped, case folded, traditional Chinese
    to simplified (OpenCC's t2s, character by character), no spaces between CJK characters."""
    text = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text)).translate(_ignorable_table())
    text = unicodedata.normalize("NFKC", text).translate(_letter_table())
    return _CJK_GAP.sub("", _INSIDE_WORD.sub("", text).casefold())


@cache
def _letter_table() -> dict[int, str]:
    """Small capitals, then confusables, then traditional characters, as one table (one pass)."""
    return {**_simplified_table(), **_skeleton_table(), **_small_capitals()}


_BIDI_OVERRIDE = re.compile("[\u202a-\u202e\u2066-\u2069]")
_TAG = re.compile(r"</?[A-Za-z!][^<>]{0,200}>")
_LETTER = r"[^\W\d_]"
# Marks between two letters of one word ("ans-wer", "a.n.s.w.e.r") and a run of three or more
# single letters spaced out ("a n s w e r"): both read as the word they spell.
_IN_WORD_MARK = re.compile(rf"(?<={_LETTER})[-‐‑‒–—_.'’/|]+(?={_LETTER})")
_SPACED_LETTERS = re.compile(rf"(?<!{_LETTER}){_LETTER}(?:[\s\-_.*·/|]{{1,3}}{_LETTER}(?!{_LETTER})){{2,}}")
_SPACING = re.compile(r"[\s\-_.*·/|]+")
# Leetspeak, read inside a token that also has a letter ("4nsw3r"; "50" stays a number).
_LEET_TOKEN = re.compile(r"[a-z0-9@$!|+]+")
_LEET_MARK = re.compile(r"[a-z][0-9@$!|+]|[0-9@$!|+][a-z]")
_LEET_TABLES = (str.maketrans("4@31!|05$7+", "aaeiiiosstt"), str.maketrans("4@31!|05$7+", "aaelilosstt"))   # 1: i or l


def _unmarked(text: str) -> str:
    """The text as a browser or Markdown renderer would show it: HTML entities and percent-escapes
    decoded (repeatedly: "&amp;#97;"), comments and tags removed ("ans<!-- -->wer", "<b>ans</b>wer")."""
    for _ in range(3):
        decoded = html.unescape(urllib.parse.unquote(text)) if "&" in text or "%" in text else text
        if decoded == text:
            break
        text = decoded
    parts, pos = [], 0
    while (start := text.find("<!--", pos)) >= 0:   # a loop, not a regex: an unclosed comment is linear
        parts.append(text[pos:start])
        end = text.find("-->", start + 4)
        pos = len(text) if end < 0 else end + 3
    return _TAG.sub("", "".join(parts) + text[pos:])


def _leet(text: str, table: dict) -> str:
    return _LEET_TOKEN.sub(lambda m: m.group().translate(table) if _LEET_MARK.search(m.group()) else m.group(), text)


def _readings(answer: str) -> list[str]:
    """Every folded way the reply can be read (`fold_text` of it as written and as rendered, with
    in-word marks and letter spacing closed up, with leet digits as letters, reversed behind a bidi
    override). A forbidden word in any reading is in the reply: each reading only adds matches,
    and honest text reads the same in all of them."""
    bases = {fold_text(answer)}
    unmarked = _unmarked(answer)
    if unmarked != answer:
        bases.add(fold_text(unmarked))
    if _BIDI_OVERRIDE.search(answer):
        bases |= {b[::-1] for b in bases}
    out = set(bases)
    for base in bases:
        joined = _SPACED_LETTERS.sub(lambda m: _SPACING.sub("", m.group()), _IN_WORD_MARK.sub("", base))
        out.add(joined)
        if _LEET_MARK.search(joined):
            out.update(_leet(joined, table) for table in _LEET_TABLES)
    return list(out)



def _language(answer: str, c: dict) -> bool:
    share = language_share(answer, c["language"])
    return share is not None and share >= float(c.get("min_share", 0.9))
