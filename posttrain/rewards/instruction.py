"""Verifiers for instruction-following constraints: the checker layer, one function per constraint type.

A constraint is a dict with a `type` and its parameters, stored with the task, e.g.
`{"type": "ends_with", "value": "done"}`. A checker answers one question, does constraint X hold
for this reply, and nothing else (IFEval's reference checkers may replace them). Checks read the
answer part (after the think block), except `no_thinking`, which reads the think block itself. A
constraint cannot hold vacuously (case rules on text that is mostly uncased, an empty `ends_with`),
and counts and word lists read the reply the way a person would: words are counted conservatively
in the limit's direction (`count_words` for "at most", `count_real_words` for "at least"), and a
forbidden word or a comma is found through every spelling that reads as it (`_readings`: HTML
entities, markup, hyphens, spaced letters, leetspeak, homoglyphs, invisible characters).

Whether a reply that meets its constraints deserves the reward is the guard layer's question
(posttrain.rewards.instruction_guard: degenerate, generic, off-topic or wrong replies); the reward,
`instruction_score`, is both layers. `parse_constraints` is for data loaders: it turns a stored
value (a JSON string, a list, one dict, or the IFEval / Tulu-3 `instruction_id_list` + `kwargs`
form) into checked constraints, or raises ValueError saying which constraint is wrong and why.
"""
from __future__ import annotations

import json
import re
import unicodedata
from typing import Any, Callable

from posttrain.chat import parse_response
from posttrain.rewards import ifeval_checks
from posttrain.rewards.equation import check_equation
from posttrain.rewards.instruction_text import (
    _CJK,
    _language,
    _load_json,
    _prose,
    _readings,
    _unmarked,
    count_real_words,
    count_words,
    fold_text,
)
from posttrain.rewards.language import CJK_CLASS

INSTRUCTION_VERSION = "instruction/8"   # equation: a stated equation must hold
_TYPES = {"int": int, "str": str, "float": (int, float), "bool": bool, "list": list, "dict": dict}
LANGUAGES = ("en", "zh")  # the codes posttrain.rewards.language can measure


# ---------------------------------------------------------------- words

# A token is a CJK ideograph, a run of letters, or a number: punctuation, symbols and markup are
# not words, so "... ---" counts zero words and "答案是 3" four.

def _forbidden_list(c: dict) -> list[str]:
    words = list(c.get("words") or [])
    if c.get("value") is not None and c["value"] not in words:
        words.append(c["value"])
    return words


# A word character that is not CJK: a Latin word glued to Chinese text ("是answer") is still a word.
_LATIN_WORD_CHAR = f"[^\\W{CJK_CLASS}]"


def _forbidden(answer: str, c: dict) -> bool:
    readings = _readings(answer)
    for word in _forbidden_list(c):
        target = fold_text(str(word)).strip()
        if not target:
            return False  # a forbidden "word" that is empty after folding forbids nothing: refuse
        if _CJK.search(target) or not re.match(r"\w", target[0]) or not re.match(r"\w", target[-1]):
            if any(target in folded for folded in readings):
                return False
        else:
            pattern = re.compile(rf"(?<!{_LATIN_WORD_CHAR}){re.escape(target)}(?!{_LATIN_WORD_CHAR})")
            if any(pattern.search(folded) for folded in readings):
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


_END_PUNCTUATION = ".。!！\"”"   # and closing quotes: a quoted reply ends with its last word


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
    """Case rules need text whose letters have a case: CJK, digits and punctuation are neither upper
    nor lower, so at least half the letters must be cased ("答案是三十六 OK" is not in capitals)."""
    cased = sum(map(str.isupper, text)) + sum(map(str.islower, text))
    return cased > 0 and 2 * cased >= sum(map(str.isalpha, text))


def _uppercase(answer: str, c: dict) -> bool:
    text = _prose(answer)
    return _cased(text) and text == text.upper()


def _lowercase(answer: str, c: dict) -> bool:
    text = _prose(answer)
    return _cased(text) and text == text.lower()


def _max_words(answer: str, c: dict) -> bool:
    return 0 < count_words(answer) <= c["value"]


def _min_words(answer: str, c: dict) -> bool:
    return count_real_words(answer, enough=c["value"]) >= c["value"]


# Commas of every script, and look-alikes: NFKC maps fullwidth and small forms onto some of these.
_COMMAS = frozenset(",，、﹐﹑､︐‚،⹁⸴⸲߸᠂᠈꓾\u0326")


def _no_comma(answer: str, c: dict) -> bool:
    """No comma as written, after NFKC, or as rendered (`&comma;`, `&#44;`, `%2C`)."""
    unmarked = _unmarked(answer)
    views = (answer, unicodedata.normalize("NFKC", answer), unmarked, unicodedata.normalize("NFKC", unmarked))
    return not any(ch in _COMMAS for text in views for ch in text)




CONSTRAINT_CHECKS: dict[str, Callable[[str, dict], bool]] = {
    "json": _json, "ends_with": _ends_with, "starts_with": _starts_with, "uppercase": _uppercase,
    "lowercase": _lowercase, "max_words": _max_words, "min_words": _min_words,
    "forbidden_words": _forbidden, "language": _language, "no_comma": _no_comma, "equation": check_equation,
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
    "equation": ((), lambda c: None),
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

# type -> the reply without the text the constraint dictates at its start or end, None if it has none there
DICTATED_SPLITS: dict[str, Callable[[str, dict], str | None]] = {
    "starts_with": lambda answer, c: _split_start(answer, c["value"]),
    "ends_with": lambda answer, c: _split_end(answer, c["value"])}


def _content(answer: str, constraints: list[dict]) -> str:
    """The reply without the words its constraints dictate: a required opening or closing word is
    format, not content ("done" alone does not answer a task that must end with "done")."""
    for c in constraints:
        split = DICTATED_SPLITS.get(c["type"])
        while split and (rest := split(answer, c)) is not None and rest != answer:
            answer = rest   # every copy: "done done" is the closing word twice, still no content
    return answer


def instruction_score(response: str, constraints: Any, partial: bool = False, *,
                      reference: str | None = None, prompt: str | None = None) -> float:
    """The reward: 1.0 when every constraint holds (or the fraction that hold, with partial=True)
    and the guard layer finds the reply a real answer to this prompt (`instruction_guard`: with the
    task's reference answer and prompt text when the row has them). Never raises: invalid
    constraints (a malformed string included) score 0."""
    from posttrain.rewards.instruction_guard import instruction_verdict

    return instruction_verdict(response, constraints, partial, reference=reference, prompt=prompt)[0]


# The rest of IFEval's instructions (posttrain.rewards.ifeval_checks) join the tables above.
ifeval_checks.register(CONSTRAINT_CHECKS, _PARAMETERS, IFEVAL_IDS, DICTATED_SPLITS)
KNOWN_TYPES = ("no_thinking", *CONSTRAINT_CHECKS)
