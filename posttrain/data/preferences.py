"""Preference data: the `preferences` data role, rows in TRL's preference formats.

TRL ("Dataset formats", preference type) takes a pair of completions to one prompt, the prompt
either explicit (``{"prompt", "chosen", "rejected"}``) or implicit (``{"chosen", "rejected"}``, the
prompt being their shared beginning), each of them standard text or conversational (lists of
``{"role", "content"}``). Every row is normalised to TRL's explicit-prompt form in the format it came
in: ``{"prompt", "chosen", "rejected", "language"}``, plus ``score_chosen`` / ``score_rejected`` (kept
as given, a margin for a reward model) and ``prompt_id`` / ``id`` / ``source`` when the row has
them. An implicit prompt is taken out by TRL's own ``trl.data_utils.maybe_extract_prompt``, which
also reads UltraFeedback-binarized's shape (a ``prompt`` string beside conversational ``chosen`` /
``rejected`` that repeat it as their first turn). A text ``prompt`` beside conversational completions
that hold the replies alone (no shared beginning for TRL to find) is read as the user turn.

Refused, naming file, row or line, and column: a row without ``chosen`` and ``rejected``; a
completion that is empty or, conversational, holds anything but assistant turns (a conversational
prompt ends on a user turn); no shared prompt; ``chosen`` equal to ``rejected`` (reason
``identical_pair``); ``score_chosen`` below ``score_rejected`` (reason ``inverted_scores``: the pair
says the rejected reply scored better, most likely swapped columns); a score that is not a finite
number. The two reasons may be dropped and counted instead (``drop: [identical_pair,
inverted_scores]`` on the source). Equal scores (a tie) are kept. One role holds one format: standard
and conversational rows mixed are refused (`check_role`), since a trainer tokenises them differently.

The reward_model stage trains a reward model on the role (TRL's RewardTrainer, stages/reward_model.py).
"""
from __future__ import annotations

import json
import math

from posttrain.data.files import DatasetError
from posttrain.data.transforms import RowRefused, origin

ROLE = "preferences"


def _trl_extract(example: dict) -> dict:
    from trl.data_utils import maybe_extract_prompt   # TRL's own rule for implicit prompts

    return maybe_extract_prompt(example)


def _value(value, where: str, column: str):
    """Text as it is, or a list of messages (given as such, or as its JSON text: CSV cells)."""
    from posttrain.data.sources import _messages

    if isinstance(value, str) and value.lstrip().startswith("[{"):
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            return value
        if isinstance(decoded, list) and all(isinstance(m, dict) and ("role" in m or "from" in m) for m in decoded):
            value = decoded
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return _messages(value, where, column)
    raise DatasetError(f"{where}: column {column} must be text or a list of {{role, content}} messages "
                       f"(got {type(value).__name__})")


def _score(row: dict, column: str, where: str, columns: dict) -> float | None:
    value = row.get(column)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DatasetError(f"{where}: column {origin(column, columns)} must be a finite number (got {value!r})")
    return float(value)


def normaliser(source):
    """The role loader's row normaliser for a source of this role (posttrain.data.sources.load_role)."""
    from posttrain.data.sources import _mapped

    return lambda raw, where: normalise_preference(_mapped(raw, source, where), source, where)


def normalise_preference(row: dict, source, where: str) -> dict:
    """One row (after the source's `columns:` and `values:`) in TRL's explicit-prompt form."""
    from posttrain.data.sources import detect_language

    for setting in ("answer_from", "reply"):
        if getattr(source, setting) is not None:
            raise DatasetError(f"{source.label}: `{setting}:` makes prompt or SFT rows; role {ROLE!r} holds "
                               "preference pairs (map yours onto prompt / chosen / rejected with `columns:`)")
    cols = source.columns
    missing = [c for c in ("chosen", "rejected") if c not in row]
    if missing:
        raise DatasetError(f"{where}: a preference row needs `chosen` and `rejected` columns (and optionally "
                           f"`prompt`); it has no {' or '.join(map(repr, missing))} (has "
                           f"{', '.join(sorted(row)) or 'none'}; map yours with `columns:`)")
    example = {c: _value(row[c], where, origin(c, cols)) for c in ("prompt", "chosen", "rejected") if c in row}
    conversational = isinstance(example["chosen"], list)
    if isinstance(example["rejected"], list) != conversational:
        raise DatasetError(f"{where}: column {origin('chosen', cols)} and column {origin('rejected', cols)} must be "
                           "both text or both lists of messages")
    implicit = "prompt" not in example or isinstance(example["prompt"], list) != conversational
    extracted = _trl_extract(example) if implicit else example
    prompt, chosen, rejected = extracted["prompt"], extracted["chosen"], extracted["rejected"]
    if conversational and not prompt and isinstance(example.get("prompt"), str) and example["prompt"].strip():
        prompt = [{"role": "user", "content": example["prompt"]}]   # replies alone beside a text prompt
    told = f"column {origin('prompt', cols)}" if not implicit else \
        f"the prompt shared by {origin('chosen', cols)} and {origin('rejected', cols)}"
    if not prompt or (not conversational and not prompt.strip()):
        raise DatasetError(f"{where}: {told} is empty: the two completions share no beginning; give the prompt "
                           "in a `prompt` column")
    if conversational and prompt[-1]["role"] != "user":
        raise DatasetError(f"{where}: {told} must end with a user turn (its turns: "
                           f"{', '.join(m['role'] for m in prompt)})")
    for column, completion in (("chosen", chosen), ("rejected", rejected)):
        _check_completion(completion, conversational, where, origin(column, cols))
    if _text(chosen) == _text(rejected):
        raise RowRefused(f"{where}: column {origin('chosen', cols)} equals column {origin('rejected', cols)}: the "
                         "pair prefers nothing", "identical_pair")
    out = {"prompt": prompt, "chosen": chosen, "rejected": rejected}
    scores = {c: _score(row, c, where, cols) for c in ("score_chosen", "score_rejected")}
    if None not in scores.values() and scores["score_chosen"] < scores["score_rejected"]:
        raise RowRefused(f"{where}: column {origin('score_chosen', cols)} ({scores['score_chosen']:g}) is below "
                         f"column {origin('score_rejected', cols)} ({scores['score_rejected']:g}): the rejected reply "
                         "scored better (swapped columns?)", "inverted_scores")
    out.update({c: v for c, v in scores.items() if v is not None})
    question = prompt if not conversational else next(m["content"] for m in reversed(prompt) if m["role"] == "user")
    out["language"] = str(row.get("language") or source.language or detect_language(question))
    for key in ("prompt_id", "id", "source"):
        if row.get(key) is not None:
            out[key] = row[key]
    return out


def _text(completion) -> str:
    if isinstance(completion, str):
        return completion.strip()
    return json.dumps([m["content"].strip() for m in completion], ensure_ascii=False)


def _check_completion(completion, conversational: bool, where: str, column: str) -> None:
    if not conversational:
        if not completion.strip():
            raise DatasetError(f"{where}: column {column} is empty once the prompt is taken out")
        return
    roles = [m["role"] for m in completion]
    if not completion or set(roles) != {"assistant"}:
        raise DatasetError(f"{where}: column {column} must hold the assistant reply once the prompt is taken out "
                           f"(its turns: {', '.join(roles) or 'none'})")
    if not all(m["content"].strip() for m in completion):
        raise DatasetError(f"{where}: column {column}: an empty assistant reply")


def check_role(data) -> None:
    """One format in the role (RoleData)."""
    kinds = [isinstance(r["chosen"], list) for r in data.rows]
    if kinds and len(set(kinds)) > 1:
        odd = next(r for r, k in zip(data.rows, kinds) if k != kinds[0])
        said = ("conversational", "standard text") if kinds[0] else ("standard text", "conversational")
        raise DatasetError(f"{data.origins.get(id(odd), 'a row')}: role {ROLE!r} mixes formats: its first row is "
                           f"{said[0]}, this one {said[1]}; one role holds one format (TRL tokenises them "
                           "differently)")
