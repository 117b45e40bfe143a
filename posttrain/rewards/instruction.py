"""Verifiers for instruction-following constraints; each a plain function over the reply.

A constraint is a dict with a `type` and its parameters, stored with the task, e.g.
`{"type": "ends_with", "value": "done"}`. Checks read the answer part (after the think block),
except `no_thinking`, which reads the think block itself.
"""
from __future__ import annotations

import json
import re
from typing import Callable

from posttrain.chat import parse_response
from posttrain.rewards.language import language_share

INSTRUCTION_VERSION = "instruction/1"
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
_TYPES = {"int": int, "str": str, "float": (int, float), "bool": bool, "list": list, "dict": dict}


def count_words(text: str) -> int:
    """CJK characters count one word each; other text splits on whitespace."""
    return len(_CJK.findall(text)) + len(_CJK.sub(" ", text).split())


def _json(answer: str, c: dict) -> bool:
    body = re.sub(r"^```(?:json)?\s*|\s*```$", "", answer.strip())
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return False
    if not isinstance(obj, dict):
        return False
    for key, type_name in c.get("keys", {}).items():
        expected = _TYPES.get(type_name, object)
        if key not in obj or (type_name in ("int", "float") and isinstance(obj[key], bool)):
            return False
        if not isinstance(obj[key], expected):
            return False
    return True


def _strip_end(text: str) -> str:
    return text.strip().rstrip(".。!！")


def _ends_with(answer: str, c: dict) -> bool:
    return _strip_end(answer).casefold().endswith(str(c["value"]).casefold())


def _starts_with(answer: str, c: dict) -> bool:
    return answer.strip().startswith(str(c["value"]))


def _uppercase(answer: str, c: dict) -> bool:
    return any(ch.isalpha() for ch in answer) and answer == answer.upper()


def _lowercase(answer: str, c: dict) -> bool:
    return any(ch.isalpha() for ch in answer) and answer == answer.lower()


def _max_words(answer: str, c: dict) -> bool:
    return 0 < count_words(answer) <= int(c["value"])


def _min_words(answer: str, c: dict) -> bool:
    return count_words(answer) >= int(c["value"])


def _forbidden(answer: str, c: dict) -> bool:
    for word in c.get("words", [c.get("value")]):
        if word is None:
            continue
        if _CJK.search(word):
            if word in answer:
                return False
        elif re.search(rf"\b{re.escape(word)}\b", answer, flags=re.I):
            return False
    return True


def _language(answer: str, c: dict) -> bool:
    share = language_share(answer, c["language"])
    return share is not None and share >= float(c.get("min_share", 0.9))


CONSTRAINT_CHECKS: dict[str, Callable[[str, dict], bool]] = {
    "json": _json, "ends_with": _ends_with, "starts_with": _starts_with, "uppercase": _uppercase,
    "lowercase": _lowercase, "max_words": _max_words, "min_words": _min_words,
    "forbidden_words": _forbidden, "language": _language,
}


def check_constraint(response: str, constraint: dict) -> bool:
    """Never raises: a malformed constraint or response scores False."""
    try:
        parsed = parse_response(response)
        if constraint["type"] == "no_thinking":
            return parsed.empty_think or (parsed.think_blocks == 0 and not parsed.closed)
        if parsed.think_blocks and not parsed.closed:
            return False  # still thinking: the reply never started
        return CONSTRAINT_CHECKS[constraint["type"]](parsed.answer, constraint)
    except (KeyError, TypeError, ValueError):
        return False


def validate_constraints(constraints: list[dict]) -> None:
    for c in constraints:
        if not isinstance(c, dict) or c.get("type") not in (*CONSTRAINT_CHECKS, "no_thinking"):
            raise ValueError(f"unknown constraint {c!r}; known types: no_thinking, {', '.join(CONSTRAINT_CHECKS)}")


def instruction_score(response: str, constraints: list[dict], partial: bool = False) -> float:
    """1.0 when every constraint holds (or the fraction that hold, with partial=True)."""
    if not constraints:
        return 1.0
    held = [check_constraint(response, c) for c in constraints]
    return sum(held) / len(held) if partial else float(all(held))
