"""Instruction rows in the forms they are published in, beside ours (`constraints`) and IFEval's
(`instruction_id_list` + `kwargs`, posttrain.rewards.instruction.constraints_from_ifeval):

- RLVR-IFeval (allenai/RLVR-IFeval, Tülu 3's RLVR data): a `ground_truth` column holding, as JSON
  text, `{"func_name": ..., <its arguments>}` in Open-Instruct's IFEvalG function names
  (`open_instruct/if_functions.py`), every argument of every function present and null where
  unused. `constraints_from_ground_truth` maps each function onto our constraint types with
  Open-Instruct's meaning (`verify_keyword_frequency` means exactly N times, `around` allows 10%,
  a sentence count around N allows one either way); an unknown function is refused, named.

`ifeval_field` keeps an IFEval row's ids and kwargs (nulls dropped) on the prepared row, so an
evaluation suite can report IFEval's own four accuracies (posttrain.rewards.ifeval_reference).
"""
from __future__ import annotations

import ast
import json
from typing import Any, Callable

from posttrain.rewards.instruction import validate_constraints


def _relation(args: dict, kind: str, tolerance: int | None = None) -> dict:
    out = {"type": kind, "relation": args.get("quantifier"), "count": args.get("N")}
    return {**out, "tolerance": tolerance} if tolerance is not None and out["relation"] == "around" else out


def _words(args: dict) -> list[dict]:
    n, quantifier = args.get("N"), args.get("quantifier")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"validate_word_constraint needs a whole number N of at least 1, got {n!r}")
    spread = max(round(n * 0.1), 1) if quantifier == "around" else 0
    bounds = {"at least": (n, None), "at most": (None, n), "around": (n - spread, n + spread), "exactly": (n, n)}
    if quantifier not in bounds:
        raise ValueError(f"validate_word_constraint: quantifier must be one of {', '.join(bounds)}, got {quantifier!r}")
    least, most = bounds[quantifier]
    return ([{"type": "min_words", "value": least}] if least and least > 0 else []) + \
        ([{"type": "max_words", "value": most}] if most is not None else [])


def _options(value: Any) -> list | None:
    """`options` as a list: given as one, as a Python tuple's text, or as comma-separated text."""
    if value is None or isinstance(value, list):
        return value
    if isinstance(value, str):
        try:
            parsed = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            parsed = [part.strip() for part in value.split(",") if part.strip()]
        return list(parsed) if isinstance(parsed, (list, tuple)) else [str(parsed)]
    raise ValueError(f"validate_choice: options must be a list or text, got {value!r:.100}")


_ENGLISH = {"type": "language", "language": "en", "detect": True}

# IFEvalG function -> our constraint(s), from its arguments (nulls dropped).
RLVR_FUNCTIONS: dict[str, Callable[[dict], dict | list[dict]]] = {
    "verify_keywords": lambda a: {"type": "keywords", "words": a.get("keyword_list")},
    "verify_keyword_frequency": lambda a: {"type": "keyword_frequency", "value": a.get("word"), "relation": "exactly",
                                           "count": a.get("N")},
    "validate_forbidden_words": lambda a: {"type": "forbidden_words", "words": a.get("forbidden_words")},
    "verify_letter_frequency": lambda a: {"type": "letter_frequency", "letter": a.get("letter"), "relation": "exactly",
                                          "count": a.get("N")},
    "validate_response_language": lambda a: {"type": "language", "language": a.get("language"), "detect": True},
    "verify_paragraph_count": lambda a: {"type": "paragraphs", "count": a.get("N")},
    "validate_word_constraint": _words,
    "verify_sentence_constraint": lambda a: _relation(a, "sentences", tolerance=1),
    "validate_paragraphs": lambda a: {"type": "paragraph_first_word", "count": a.get("N"), "nth": a.get("i"),
                                      "value": a.get("first_word")},
    "verify_postscript": lambda a: {"type": "postscript", "marker": a.get("postscript_marker")},
    "validate_placeholders": lambda a: {"type": "placeholders", "count": a.get("N")},
    "verify_bullet_points": lambda a: {"type": "bullets", "count": a.get("N")},
    "validate_title": lambda a: {"type": "title"},
    "validate_choice": lambda a: {"type": "constrained_response", "options": _options(a.get("options"))},
    "validate_highlighted_sections": lambda a: {"type": "highlights", "count": a.get("N")},
    "validate_sections": lambda a: {"type": "sections", "splitter": a.get("section_splitter"), "count": a.get("N")},
    "validate_json_format": lambda a: {"type": "json"},
    "validate_repeat_prompt": lambda a: {"type": "repeat_prompt", "prompt": a.get("original_prompt")},
    "validate_two_responses": lambda a: {"type": "two_responses"},
    "validate_uppercase": lambda a: [{"type": "uppercase"}, _ENGLISH],
    "validate_lowercase": lambda a: [{"type": "lowercase"}, _ENGLISH],
    "validate_frequency_capital_words": lambda a: _relation(a, "capital_words"),
    "validate_end": lambda a: {"type": "ends_with", "value": a.get("end_phrase")},
    "validate_quotation": lambda a: {"type": "quotation"},
    "validate_no_commas": lambda a: {"type": "no_comma"},
}


def constraints_from_ground_truth(value: Any) -> list[dict]:
    """Our constraints for an RLVR-IFeval `ground_truth` (its JSON text, one object, or a list of
    them). Raises ValueError naming the function that is unknown or the argument that is wrong."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            raise ValueError(f"not valid JSON: {value[:80]!r}") from None
    items = value if isinstance(value, list) else [value]
    out: list[dict] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("func_name"), str):
            raise ValueError(f"must be an object with a `func_name`, got {item!r:.200}")
        name = item["func_name"]
        if name not in RLVR_FUNCTIONS:
            raise ValueError(f"unknown func_name {name!r:.100}; known (Open-Instruct's IFEvalG): "
                             f"{', '.join(RLVR_FUNCTIONS)}")
        args = {k: v for k, v in item.items() if v is not None and k != "func_name"}
        try:
            made = RLVR_FUNCTIONS[name](args)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
        out.extend(made if isinstance(made, list) else [made])
    try:
        validate_constraints(out)
    except ValueError as exc:
        raise ValueError(f"func_name {', '.join(i['func_name'] for i in items)}: {exc}") from None
    return out


def ifeval_field(row: dict) -> dict:
    """What a prepared row keeps of its IFEval form (read as such: no `constraints` column beside
    it): `{"ifeval": {"instruction_id_list", "kwargs"}}`, kwargs without their nulls; else nothing."""
    if "instruction_id_list" not in row or "constraints" in row:
        return {}
    ids, kwargs = list(row["instruction_id_list"]), row.get("kwargs") or [{}] * len(row["instruction_id_list"])
    return {"ifeval": {"instruction_id_list": ids,
                       "kwargs": [{k: v for k, v in (kw or {}).items() if v is not None} for kw in kwargs]}}
