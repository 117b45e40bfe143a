"""Verifiers for instruction-following constraints; each a plain function over the reply.

A constraint is a dict with a `type` and its parameters, stored with the task, e.g.
`{"type": "ends_with", "value": "done"}`. Checks read the answer part (after the think block),
except `no_thinking`, which reads the think block itself.

`instruction_score` is the reward: it pays nothing for a degenerate reply (`degenerate_reason`:
empty, only special tokens, markup, punctuation or digits, one token or phrase repeated), nothing
for an invalid constraint set, and a constraint cannot hold vacuously (case rules on text with no
cased letter, an empty `ends_with`). `parse_constraints` is for data loaders: it turns a stored
value (a JSON string, a list, one dict, or the IFEval / Tulu-3 `instruction_id_list` + `kwargs`
form) into checked constraints, or raises ValueError saying which constraint is wrong and why.
"""
from __future__ import annotations

import json
import re
import unicodedata
from functools import cache
from typing import Any, Callable

from confusable_homoglyphs.confusables import confusables_data
from opencc import OpenCC

from posttrain.chat import parse_response
from posttrain.rewards.language import CJK_CLASS, language_share

INSTRUCTION_VERSION = "instruction/3"
_CJK = re.compile(f"[{CJK_CLASS}]")
_TYPES = {"int": int, "str": str, "float": (int, float), "bool": bool, "list": list, "dict": dict}
LANGUAGES = ("en", "zh")  # the codes posttrain.rewards.language can measure


# ---------------------------------------------------------------- words and degenerate replies

# A token is a CJK ideograph, a run of letters, or a number: punctuation, symbols and markup are
# not words, so "... ---" counts zero words and "答案是 3" four.
_TOKEN = re.compile(f"[{CJK_CLASS}]|(?:(?![{CJK_CLASS}])[^\\W\\d_])+|\\d+(?:[.,]\\d+)*")
# Special tokens (`<|im_end|>`, `<|endoftext|>`) and tag-like markers (`<think>`, `</s>`, `<unk>`).
_SPECIAL = re.compile(r"<\|[^<>|\s]{1,40}\|>|</?[A-Za-z][\w-]{0,30}>")
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")
_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*")


def _prose(text: str) -> str:
    """The text without special tokens, tags and LaTeX commands (`\\boxed` is markup, not words)."""
    return _LATEX_COMMAND.sub(" ", _SPECIAL.sub(" ", unicodedata.normalize("NFKC", text)))


def tokens(text: str) -> list[str]:
    """The reply's words and numbers (NFKC, case-folded), markup left out (`_prose`)."""
    return [t.casefold() for t in _TOKEN.findall(_prose(text))]


_KANA_HANGUL = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uac00-\ud7af\uff66-\uff9f]")
_HUMP = re.compile(r"(?<=[a-z])(?=[A-Z])")


def count_words(text: str) -> int:
    """CJK characters count one word each; so does every run of letters and every number, a
    camelCase run counts its humps ("TheAnswerIsFive" is four words, not one) and kana and Hangul
    count per syllable, as ideographs do (a word-count limit cannot be met by gluing words)."""
    prose = _prose(text)
    glued = sum(len(_HUMP.findall(run)) for run in re.findall(r"[A-Za-z]+", prose))
    syllables = _KANA_HANGUL.findall(prose)
    runs = len(re.findall(f"(?:{_KANA_HANGUL.pattern})+", prose))
    return len(tokens(text)) + glued + len(syllables) - runs


def _is_word(token: str) -> bool:
    """A CJK ideograph or at least two letters: one Latin letter ("A") is not an answer."""
    return bool(_CJK.fullmatch(token)) or (len(token) >= 2 and not token[0].isdigit())


def _one_block_repeated(units: list[str]) -> bool:
    """The whole reply is one token or phrase said at least twice ("the the", "ok ok ok", a loop; a
    cut-off last repeat included). Its shortest period, from the KMP prefix function (linear time:
    a reward must not hang on a long reply), is at most half its length."""
    n = len(units)
    prefix = [0] * n
    for i in range(1, n):
        k = prefix[i - 1]
        while k and units[i] != units[k]:
            k = prefix[k - 1]
        prefix[i] = k + (units[i] == units[k])
    return n >= 2 and n - prefix[-1] <= n // 2


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


def _load_json(answer: str):
    return json.loads(_json_body(answer), parse_constant=_no_constant)


def _json_leaves(answer: str) -> str | None:
    """The values of a JSON reply, space-joined (its keys are the format, not the answer)."""
    body = _json_body(answer)
    if not body.startswith(("{", "[")):
        return None
    try:
        obj = _load_json(body)
    except (ValueError, RecursionError):
        return None
    leaves, stack = [], [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif item is not None and not isinstance(item, bool):
            leaves.append(str(item))
    return " ".join(leaves)


# A reply of this many tokens or more that uses at most a fifth as many distinct ones is padding
# ("the the ... the end" to reach a word count); natural English or Chinese of that length uses over
# twice that share.
_PADDING_MIN_TOKENS = 20


def degenerate_reason(answer: str, reference: str | None = None) -> str | None:
    """Why `answer` (the reply after its think block) is no real reply; None when it is one.

    A real reply has at least one content token of the kind the task asks for: a number when the
    task's reference answer is a number, otherwise a word (a CJK ideograph, or a run of two or more
    letters). So these are degenerate: empty text, only special tokens (`<|im_end|>`), markup or
    punctuation, a single letter, digits alone where the task does not ask for a number (or has no
    reference), any reply that is one token or phrase repeated, and padding (`_PADDING_MIN_TOKENS`).
    A JSON reply is judged by its values. The reference only decides which kind of token counts;
    it is never compared with the reply (correctness is another reward's job)."""
    leaves = _json_leaves(answer)
    units = tokens(answer if leaves is None else leaves)
    if not units:
        return "no words: empty, or only special tokens, markup and punctuation"
    if len(units) >= 2 and _one_block_repeated(units):
        return "one token or phrase repeated"
    if len(units) >= _PADDING_MIN_TOKENS and len(set(units)) * 5 <= len(units):
        return "a few tokens said over and over (padding)"
    numeric_task = reference is not None and _NUMBER.fullmatch(str(reference).strip()) is not None
    if numeric_task:
        return None if any(u[0].isdigit() for u in units) else "the task asks for a number and the reply has none"
    if any(_is_word(u) for u in units):
        return None
    return "no content word: only digits or single letters"


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
def _to_simplified() -> OpenCC:
    return OpenCC("t2s")


def _ignorable(ch: str) -> bool:
    """Zero-width and other invisible format characters, variation selectors and combining marks."""
    return unicodedata.category(ch) in ("Cf", "Mn", "Me") or 0xFE00 <= ord(ch) <= 0xFE0F \
        or ch in "\u115f\u1160\u3164\uffa0"


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
    to simplified (OpenCC t2s), no spaces between CJK characters."""
    text = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text))
    text = "".join(ch for ch in text if not _ignorable(ch))
    text = unicodedata.normalize("NFKC", text).translate(_small_capitals()).translate(_skeleton_table())
    text = _INSIDE_WORD.sub("", text).casefold()
    text = _to_simplified().convert(text)
    return _CJK_GAP.sub("", text)


def _forbidden_list(c: dict) -> list[str]:
    words = list(c.get("words") or [])
    if c.get("value") is not None and c["value"] not in words:
        words.append(c["value"])
    return words


# A word character that is not CJK: a Latin word glued to Chinese text ("是answer") is still a word.
_LATIN_WORD_CHAR = f"[^\\W{CJK_CLASS}]"


def _forbidden(answer: str, c: dict) -> bool:
    folded = fold_text(answer)
    for word in _forbidden_list(c):
        target = fold_text(str(word)).strip()
        if not target:
            return False  # a forbidden "word" that is empty after folding forbids nothing: refuse
        if _CJK.search(target) or not re.match(r"\w", target[0]) or not re.match(r"\w", target[-1]):
            if target in folded:
                return False
        elif re.search(rf"(?<!{_LATIN_WORD_CHAR}){re.escape(target)}(?!{_LATIN_WORD_CHAR})", folded):
            return False
    return True


# ---------------------------------------------------------------- the checks

def _json(answer: str, c: dict) -> bool:
    try:
        obj = _load_json(answer)
    except (ValueError, RecursionError):
        return False
    if not isinstance(obj, dict):
        return False
    for key, type_name in c.get("keys", {}).items():
        expected = _TYPES[type_name]
        if key not in obj or (type_name in ("int", "float") and isinstance(obj[key], bool)):
            return False
        if not isinstance(obj[key], expected):
            return False
    return True


_END_PUNCTUATION = ".。!！"


def _strip_end(text: str) -> str:
    return text.strip().rstrip(_END_PUNCTUATION).rstrip()


def _split_end(answer: str, value: str) -> str | None:
    """The reply before a closing `value` (a whole word, case-insensitive), or None if it does not
    end with it. Closing punctuation is ignored on both sides."""
    text, word = _strip_end(answer), _strip_end(value)
    if not word or len(word) > len(text) or text[len(text) - len(word):].casefold() != word.casefold():
        return None
    head = text[:len(text) - len(word)]
    if head and word[0].isalnum() and head[-1].isalnum() and not _CJK.match(word[0]):
        return None  # "abandoned" does not end with the word "done"
    return head


def _split_start(answer: str, value: str) -> str | None:
    text, word = answer.strip(), value.strip()
    if not word or not text.startswith(word):
        return None
    rest = text[len(word):]
    if rest and word[-1].isalnum() and rest[0].isalnum() and not _CJK.match(word[-1]):
        return None  # "Answering" does not start with the word "Answer"
    return rest


def _ends_with(answer: str, c: dict) -> bool:
    return _split_end(answer, str(c["value"])) is not None


def _starts_with(answer: str, c: dict) -> bool:
    return _split_start(answer, str(c["value"])) is not None


def _cased(text: str) -> bool:
    """Case rules need a letter that has a case: CJK, digits and punctuation are neither upper nor lower."""
    return any(ch.lower() != ch.upper() for ch in text)


def _uppercase(answer: str, c: dict) -> bool:
    text = _prose(answer)
    return _cased(text) and text == text.upper()


def _lowercase(answer: str, c: dict) -> bool:
    text = _prose(answer)
    return _cased(text) and text == text.lower()


def _max_words(answer: str, c: dict) -> bool:
    return 0 < count_words(answer) <= c["value"]


def _min_words(answer: str, c: dict) -> bool:
    return count_words(answer) >= c["value"]


# Commas of every script, and look-alikes: NFKC maps fullwidth and small forms onto some of these.
_COMMAS = frozenset(",，、﹐﹑､︐‚،⹁⸴⸲߸᠂᠈꓾\u0326")


def _no_comma(answer: str, c: dict) -> bool:
    return not any(ch in _COMMAS for text in (answer, unicodedata.normalize("NFKC", answer)) for ch in text)


def _language(answer: str, c: dict) -> bool:
    share = language_share(answer, c["language"])
    return share is not None and share >= float(c.get("min_share", 0.9))


CONSTRAINT_CHECKS: dict[str, Callable[[str, dict], bool]] = {
    "json": _json, "ends_with": _ends_with, "starts_with": _starts_with, "uppercase": _uppercase,
    "lowercase": _lowercase, "max_words": _max_words, "min_words": _min_words,
    "forbidden_words": _forbidden, "language": _language, "no_comma": _no_comma,
}
KNOWN_TYPES = ("no_thinking", *CONSTRAINT_CHECKS)


def check_constraint(response: str, constraint: dict) -> bool:
    """Whether one constraint holds (not whether the reply deserves a reward: `instruction_score`).
    Never raises: a malformed constraint or response scores False."""
    try:
        parsed = parse_response(response)
        if constraint["type"] == "no_thinking":
            return parsed.empty_think or (parsed.think_blocks == 0 and not parsed.closed)
        if parsed.think_blocks and not parsed.closed:
            return False  # still thinking: the reply never started
        return CONSTRAINT_CHECKS[constraint["type"]](parsed.answer, constraint)
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError):
        return False


# ---------------------------------------------------------------- validation and parsing

def _text(c: dict, key: str) -> str | None:
    value = c.get(key)
    if not isinstance(value, str) or not value.strip():
        return f"`{key}` must be a non-empty string, got {value!r}"
    return None


def _positive_int(c: dict, key: str) -> str | None:
    value = c.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"`{key}` must be a whole number of at least 1, got {value!r}"
    return None


def _check_json(c: dict) -> str | None:
    keys = c.get("keys", {})
    if not isinstance(keys, dict):
        return f"`keys` must map key names to types, got {keys!r}"
    for key, type_name in keys.items():
        if not isinstance(key, str) or not key.strip():
            return "`keys` has an empty key name"
        if type_name not in _TYPES:
            return f"key {key!r} has unknown type {type_name!r}; known: {', '.join(_TYPES)}"
    return None


def _check_forbidden(c: dict) -> str | None:
    if "words" in c and not isinstance(c["words"], list):
        return f"`words` must be a list of words, got {c['words']!r}"
    words = _forbidden_list(c)
    if not words:
        return "needs a non-empty `words` list (or a `value`)"
    for word in words:
        if not isinstance(word, str) or not fold_text(word).strip():
            return f"forbidden word {word!r} is empty (after removing invisible characters)"
    return None


def _check_language(c: dict) -> str | None:
    if c.get("language") not in LANGUAGES:
        return f"unknown language code {c.get('language')!r}; known: {', '.join(LANGUAGES)}"
    share = c.get("min_share", 0.9)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        return f"`min_share` must be a number in (0, 1], got {share!r}"
    return None


# type -> (allowed parameters, checker of their values)
_PARAMETERS: dict[str, tuple[tuple[str, ...], Callable[[dict], str | None]]] = {
    "no_thinking": ((), lambda c: None),
    "uppercase": ((), lambda c: None),
    "lowercase": ((), lambda c: None),
    "no_comma": ((), lambda c: None),
    "json": (("keys",), _check_json),
    "ends_with": (("value",), lambda c: _text(c, "value")),
    "starts_with": (("value",), lambda c: _text(c, "value")),
    "max_words": (("value",), lambda c: _positive_int(c, "value")),
    "min_words": (("value",), lambda c: _positive_int(c, "value")),
    "forbidden_words": (("words", "value"), _check_forbidden),
    "language": (("language", "min_share"), _check_language),
}


def validate_constraints(constraints: Any) -> None:
    """Raise ValueError naming the first constraint that is unknown, malformed or vacuous (one every
    reply meets), or a set that is empty or contradicts itself."""
    if not isinstance(constraints, list) or not constraints:
        raise ValueError(f"constraints must be a non-empty list of constraint objects, got {constraints!r:.200}")
    for i, c in enumerate(constraints):
        if not isinstance(c, dict):
            raise ValueError(f"constraint {i} must be an object with a `type`, got {c!r:.200}")
        ctype = c.get("type")
        if not isinstance(ctype, str) or ctype not in _PARAMETERS:
            raise ValueError(f"constraint {i}: unknown type {ctype!r:.100}; known types: {', '.join(KNOWN_TYPES)}")
        allowed, check = _PARAMETERS[ctype]
        extra = sorted(set(c) - {"type", *allowed})
        problem = (f"unknown parameter(s) {extra}; {ctype} takes {list(allowed) or 'none'}" if extra
                   else check(c))
        if problem:
            raise ValueError(f"constraint {i} ({ctype}): {problem}")
    by_type = {c["type"]: c for c in constraints}
    if "uppercase" in by_type and "lowercase" in by_type:
        raise ValueError("constraints uppercase and lowercase cannot both hold")
    if "min_words" in by_type and "max_words" in by_type \
            and by_type["min_words"]["value"] > by_type["max_words"]["value"]:
        raise ValueError(f"constraints min_words {by_type['min_words']['value']} > "
                         f"max_words {by_type['max_words']['value']} cannot both hold")


def parse_constraints(value: Any) -> list[dict]:
    """Checked constraints from what a data file stores: a JSON string, a list of constraint
    objects, one object, or the IFEval / Tulu-3 form `{"instruction_id_list": [...], "kwargs": [...]}`.
    Raises ValueError with a message saying what is wrong (never JSONDecodeError or KeyError)."""
    if isinstance(value, (bytes, bytearray)):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"constraints are not UTF-8 text: {exc}") from None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except RecursionError:
            raise ValueError("constraints nest too deeply to be constraints") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"constraints are not valid JSON ({exc.msg} at line {exc.lineno} column "
                             f"{exc.colno}): {exc.doc[:80]!r}") from None
    if isinstance(value, dict) and "instruction_id_list" in value:
        constraints = constraints_from_ifeval(value["instruction_id_list"], value.get("kwargs"))
    else:
        constraints = [value] if isinstance(value, dict) else value
    validate_constraints(constraints)
    return constraints


# ---------------------------------------------------------------- the IFEval / Tulu-3 form

def _ifeval_words(kw: dict) -> dict:
    relation, n = kw.get("relation"), kw.get("num_words")
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"needs an integer num_words, got {n!r}")
    if relation == "less than":
        return {"type": "max_words", "value": n - 1}
    if relation == "at least":
        return {"type": "min_words", "value": n}
    raise ValueError(f"relation must be 'less than' or 'at least', got {relation!r}")


def _ifeval_language(kw: dict) -> dict:
    code = kw.get("language")
    if code not in LANGUAGES:
        raise ValueError(f"language {code!r} cannot be measured here; known: {', '.join(LANGUAGES)}")
    return {"type": "language", "language": code}


# IFEval instruction id -> our constraint(s). IFEval's english_capital / english_lowercase also
# require English, hence the extra language constraint.
IFEVAL_IDS: dict[str, Callable[[dict], dict | list[dict]]] = {
    "punctuation:no_comma": lambda kw: {"type": "no_comma"},
    "length_constraints:number_words": _ifeval_words,
    "keywords:forbidden_words": lambda kw: {"type": "forbidden_words", "words": kw.get("forbidden_words")},
    "change_case:english_lowercase": lambda kw: [{"type": "lowercase"}, {"type": "language", "language": "en"}],
    "change_case:english_capital": lambda kw: [{"type": "uppercase"}, {"type": "language", "language": "en"}],
    "detectable_format:json_format": lambda kw: {"type": "json"},
    "startend:end_checker": lambda kw: {"type": "ends_with", "value": kw.get("end_phrase")},
    "language:response_language": _ifeval_language,
}


def constraints_from_ifeval(instruction_id_list: Any, kwargs: Any) -> list[dict]:
    """Our constraints for an IFEval / Tulu-3 row (`instruction_id_list` and its parallel `kwargs`
    list of dicts; None-valued kwargs, as a merged-schema dataset stores them, are ignored).
    Raises ValueError naming an id this verifier cannot check."""
    if not isinstance(instruction_id_list, list) or not instruction_id_list:
        raise ValueError(f"instruction_id_list must be a non-empty list, got {instruction_id_list!r:.200}")
    kwargs = [{}] * len(instruction_id_list) if kwargs is None else kwargs
    if not isinstance(kwargs, list) or len(kwargs) != len(instruction_id_list):
        raise ValueError(f"kwargs must be a list parallel to instruction_id_list "
                         f"({len(instruction_id_list)} ids), got {kwargs!r:.200}")
    out: list[dict] = []
    for iid, kw in zip(instruction_id_list, kwargs):
        if iid not in IFEVAL_IDS:
            raise ValueError(f"IFEval instruction {iid!r:.100} has no verifier here; supported: {', '.join(IFEVAL_IDS)}")
        if kw is not None and not isinstance(kw, dict):
            raise ValueError(f"IFEval instruction {iid!r}: kwargs must be an object, got {kw!r:.200}")
        given = {k: v for k, v in (kw or {}).items() if v is not None}
        try:
            made = IFEVAL_IDS[iid](given)
        except ValueError as exc:
            raise ValueError(f"IFEval instruction {iid!r}: {exc}") from None
        out.extend(made if isinstance(made, list) else [made])
    try:
        validate_constraints(out)
    except ValueError as exc:
        raise ValueError(f"IFEval instructions {instruction_id_list}: {exc}") from None
    return out


# ---------------------------------------------------------------- the reward

def _content(answer: str, constraints: list[dict]) -> str:
    """The reply without the words its constraints dictate: a required opening or closing word is
    format, not content ("done" alone does not answer a task that must end with "done")."""
    for c in constraints:
        split = {"starts_with": _split_start, "ends_with": _split_end}.get(c["type"])
        while split and (rest := split(answer, c["value"])) is not None and rest != answer:
            answer = rest   # every copy: "done done" is the closing word twice, still no content
    return answer


def instruction_score(response: str, constraints: Any, partial: bool = False, *,
                      reference: str | None = None) -> float:
    """1.0 when every constraint holds (or the fraction that hold, with partial=True), and the reply
    is a real one (`degenerate_reason`, judged with the task's reference answer when it has one).
    Never raises: invalid constraints (a malformed string included) and degenerate replies score 0."""
    try:
        constraints = parse_constraints(constraints)
        if not isinstance(response, str):
            return 0.0
        parsed = parse_response(response)
        if (parsed.think_blocks and not parsed.closed) or parsed.closes > 1 or \
                degenerate_reason(_content(parsed.answer, constraints), reference) is not None:
            return 0.0
        held = [check_constraint(response, c) for c in constraints]
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return 0.0
    return sum(held) / len(held) if partial else float(all(held))
