"""Source transforms: how a dataset as it is published becomes our rows, said in the config on the
data source (posttrain.data.sources.SourceConfig), validated there, printed by `posttrain data check`.
They shape the rows a role holds, so they key the stages that read it through the rows' content
hash (posttrain.data.prepared), and the config hash of every registered version names them.

Applied to each row in this order:

- ``columns: {theirs: ours}`` renames; ``theirs`` may be a dotted path into a nested field
  (``verification_info.test_cases``), descending through JSON held in a string column. Mapping onto
  a name the row already has is refused: one value would silently replace the other.
- ``values: {column: map}`` (names as after ``columns:``): a dict of value -> value (``{thinking:
  {"on": true, "off": false}}``), or a regular expression whose one group is the value
  (``{difficulty: "Level (\\d+)"}``: MATH's "Level 2" -> 2). A value the map does not cover is
  refused (reason ``unmapped_value``); null stays null.
- ``answer_from: {column, extract, pattern}`` (prompt roles): the math gold answer, taken from a
  column by a named extractor: ``gsm8k`` (what follows the last ``####``, thousands separators
  removed: ``#### 1,234`` -> ``1234``), ``boxed`` (the content of the last balanced ``\\boxed{}``
  or ``\\fbox{}``, nested braces kept), ``regex`` (``pattern``'s one group, at its last match).
  A row where the extractor finds nothing is refused (reason ``no_answer``).
- ``reply:`` (SFT roles): the final assistant reply rebuilt in the canonical think form
  (``<think>\\nreasoning\\n</think>\\n\\nanswer``, posttrain.chat.assemble_response):
  ``{reasoning: col, answer: col}`` joins a reasoning column (text, or a list of texts: s1K's
  ``thinking_trajectories``) and an answer column; ``answer`` may be an extraction like
  ``answer_from`` (NuminaMath: ``{column: solution, extract: boxed}``), written ``\\boxed{value}``;
  without ``answer`` the row's own reply is the answer. ``{markers: open_thoughts}`` (or a list
  ``[think open, think close, answer open, answer close]``) splits the row's own reply at its
  dataset's markers (OpenThoughts' ``<|begin_of_thought|>`` ... ``<|end_of_solution|>``).
- ``drop: [reason, ...]``: rows refused for these reasons are dropped and counted
  (RoleData.dropped, shown by ``data check``) instead of stopping the load: ``unverifiable_answer``
  (a gold answer the math verifier cannot check), ``no_answer``, ``no_think_block`` (a thinking-mode
  SFT reply without reasoning), ``unmapped_value``.

Without a setting, ShareGPT turns (``conversations`` of ``{from, value}``, from ``human`` / ``gpt``
/ ``system``) are read as messages. Checks of gold answers, difficulties and think blocks refuse
what a later stage would silently mis-read; every refusal is one line naming file, row or line,
column and the setting that fixes it, echoing at most the offending value, cut short.
"""
from __future__ import annotations

import json
import re
from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from posttrain.chat import THINK_CLOSE, THINK_OPEN, assemble_response, parse_response, visible
from posttrain.data.files import DatasetError
from posttrain.config.yamlconfig import short

DropReason = Literal["unverifiable_answer", "no_answer", "no_think_block", "unmapped_value",
                     "identical_pair", "inverted_scores",   # these two: posttrain.data.preferences
                     "forgeable_tests", "no_tests"]          # these two: posttrain.data.code_tests
MapValue = Union[str, int, float, bool, None]   # noqa: UP007 - pydantic reads the union in order
MARKER_PRESETS = {"open_thoughts": ["<|begin_of_thought|>", "<|end_of_thought|>",
                                    "<|begin_of_solution|>", "<|end_of_solution|>"]}
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
ECHO = 80   # characters of an offending value a message shows


class RowRefused(DatasetError):
    """A row refused for a reason that the source's `drop:` may name instead."""

    def __init__(self, message: str, reason: str):
        super().__init__(f"{message}; or drop such rows with `drop: [{reason}]`")
        self.reason = reason


class AnswerFrom(BaseModel):
    """A math answer taken from a column by a named extractor."""

    model_config = ConfigDict(extra="forbid")

    column: str
    extract: Literal["gsm8k", "boxed", "regex"]
    pattern: str | None = None   # extract: regex, with exactly one group

    @model_validator(mode="after")
    def _pattern_for_regex(self):
        if self.extract != "regex":
            if self.pattern is not None:
                raise ValueError(f"`pattern` is for `extract: regex`, not {self.extract}")
            return self
        if not self.pattern:
            raise ValueError("`extract: regex` needs a `pattern` with one group, e.g. 'answer is (\\S+)'")
        _one_group(self.pattern, "answer_from.pattern")
        return self


class ReplyFrom(BaseModel):
    """How an SFT row's assistant reply is built: reasoning (+ answer) columns, or the reply's markers."""

    model_config = ConfigDict(extra="forbid")

    reasoning: str | None = None                          # column: text, or a list of texts
    answer: str | AnswerFrom | None = None                # column, or an extraction (written \boxed{...})
    markers: Literal["open_thoughts"] | list[str] | None = None

    @model_validator(mode="after")
    def _one_way(self):
        if (self.reasoning is None) == (self.markers is None):
            raise ValueError("`reply:` takes `reasoning:` (with an optional `answer:`) or `markers:`")
        if self.markers is not None and self.answer is not None:
            raise ValueError("`reply.markers` splits the row's own reply; `answer:` goes with `reasoning:`")
        if isinstance(self.markers, list) and (len(self.markers) not in (2, 4) or not all(self.markers)):
            raise ValueError("`reply.markers` lists 2 or 4 non-empty markers: think open, think close "
                             "[, answer open, answer close]")
        return self

    def marker_list(self) -> list[str]:
        return MARKER_PRESETS[self.markers] if isinstance(self.markers, str) else list(self.markers or [])


def _one_group(pattern: str, setting: str) -> re.Pattern:
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{setting}: {pattern!r} is not a regular expression ({exc})") from None
    if compiled.groups != 1:
        raise ValueError(f"{setting}: {pattern!r} needs exactly one group, the value (has {compiled.groups})")
    return compiled


def check_value_maps(values: dict) -> dict:
    """`values:` as the config gives it: a regex with one group, or a dict whose keys are the
    values as text. An unquoted YAML on / off / yes / no key arrives as a boolean, which no text
    value would ever match: refused."""
    if not isinstance(values, dict):
        return values
    out = {}
    for column, vmap in values.items():
        if isinstance(vmap, str):
            _one_group(vmap, f"values.{column}")
        elif isinstance(vmap, dict):
            bools = [k for k in vmap if isinstance(k, bool)]
            if bools:
                raise ValueError(f"values.{column}: key {bools[0]!r} is a YAML boolean (on / off / yes / no "
                                 "unquoted): quote it, e.g. {\"on\": true, \"off\": false}")
            vmap = {str(k) if isinstance(k, (int, float)) else k: v for k, v in vmap.items()}
        out[column] = vmap
    return out


def check_columns(columns: dict) -> dict:
    """Two source columns onto one of ours: the second would silently replace the first."""
    seen: dict[str, str] = {}
    for theirs, ours in (columns or {}).items():
        if ours in seen:
            raise ValueError(f"columns: {seen[ours]!r} and {theirs!r} both onto {ours!r}: one would replace the other")
        seen[ours] = theirs
    return columns


# ---------------------------------------------------------------- columns and values


def origin(column: str, columns: dict[str, str]) -> str:
    """'answer' or "'answer' (the file's 'solution')": a column as a message names it."""
    theirs = next((k for k, v in columns.items() if v == column and k != column), None)
    return f"{column!r}" + (f" (the file's {theirs!r})" if theirs else "")


def rename(raw: dict, columns: dict[str, str], where: str) -> dict:
    """The row with `columns:` applied: renamed columns and dotted paths into nested fields."""
    missing = [theirs for theirs in columns if theirs not in raw and theirs.split(".")[0] not in raw]
    if missing:
        raise DatasetError(f"{where}: column {missing[0]!r} (mapped by `columns:` to {columns[missing[0]]!r}) "
                           f"is missing; the row has {', '.join(sorted(raw)) or 'no columns'}")
    row = {k: v for k, v in raw.items() if k not in columns}
    for theirs, ours in columns.items():
        if ours in row and ours != theirs:
            raise DatasetError(f"{where}: `columns:` maps {theirs!r} onto {ours!r}, which the row already has: one "
                               f"would silently replace the other; map the row's own {ours!r} elsewhere too "
                               f"(`columns: {{{ours}: ..., {theirs}: {ours}}}`) or map {theirs!r} to another name")
        row[ours] = raw[theirs] if theirs in raw else _dig(raw, theirs, where)
    return row


def _dig(raw: dict, path: str, where: str):
    """The value at a dotted path; a string on the way is decoded as JSON first; null stays null."""
    head, *keys = path.split(".")
    value, walked = raw[head], head
    for key in keys:
        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{where}: column {walked!r} is text that is not JSON ({exc.msg} at character "
                                   f"{exc.pos + 1}), so `columns:` cannot read {path!r} inside it") from None
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            has = f"keys {', '.join(map(str, list(value)[:8]))}" if isinstance(value, dict) else type(value).__name__
            raise DatasetError(f"{where}: column {walked!r} has no {key!r} for `columns:` path {path!r} (it has {has})")
        walked += "." + key
    return value


def lookup(row: dict, column: str, where: str, setting: str, columns: dict[str, str]):
    if column in row:
        return row[column]
    if column in columns:
        raise DatasetError(f"{where}: `{setting}` names {column!r}, which `columns:` renames to {columns[column]!r}: "
                           f"name it {columns[column]!r}")
    raise DatasetError(f"{where}: column {column!r} (named by `{setting}`) is missing; the row has "
                       f"{', '.join(sorted(row)) or 'no columns'}")


def map_values(row: dict, values: dict, where: str, columns: dict[str, str]) -> None:
    for column, vmap in values.items():
        value = lookup(row, column, where, f"values.{column}", columns)
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value)
        if isinstance(vmap, str):
            found = re.fullmatch(vmap, text.strip())
            if not found:
                raise RowRefused(f"{where}: column {origin(column, columns)} is {short(value, ECHO)}, which "
                                 f"`values.{column}` ({vmap!r}) does not match", "unmapped_value")
            row[column] = found.group(1)
        elif text in vmap:
            row[column] = vmap[text]
        else:
            raise RowRefused(f"{where}: column {origin(column, columns)} is {short(value, ECHO)}, which "
                             f"`values.{column}` does not list (it maps {short(list(vmap), ECHO)})", "unmapped_value")


# ---------------------------------------------------------------- answers


_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_THOUSANDS_RE = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def last_boxed(text: str) -> str | None:
    """The content of the last balanced \\boxed{...} (or \\fbox{...}); escaped braces do not count.
    Of nested boxes, the one that closes last (the outer)."""
    best, best_end = None, -1
    for match in _BOX_RE.finditer(text):
        depth, i = 1, match.end()
        while i < len(text) and depth:
            ch = text[i]
            if ch == "\\":
                i += 2
                continue
            depth += 1 if ch == "{" else -1 if ch == "}" else 0
            i += 1
        if depth == 0 and i > best_end:
            best, best_end = text[match.end():i - 1].strip(), i
    return best


def extract_answer(value, spec: AnswerFrom, where: str, columns: dict[str, str], setting: str = "answer_from") -> str:
    column = origin(spec.column, columns)
    if not isinstance(value, str) or not value.strip():
        raise RowRefused(f"{where}: column {column} is {'empty' if value in (None, '') else 'not text'}, "
                         f"so `{setting}` has no answer to take", "no_answer")
    if spec.extract == "gsm8k":
        if "####" not in value:
            raise RowRefused(f"{where}: column {column} has no `#### N` line for `{setting}` (extract: gsm8k)",
                             "no_answer")
        answer = value.rsplit("####", 1)[1].strip()
        return answer.replace(",", "") if _THOUSANDS_RE.fullmatch(answer) else answer
    if spec.extract == "boxed":
        answer = last_boxed(value)
        if answer is None:
            raise RowRefused(f"{where}: column {column} has no \\boxed{{}} for `{setting}` (extract: boxed)",
                             "no_answer")
        return answer
    found = list(re.finditer(spec.pattern, value))
    if not found:
        raise RowRefused(f"{where}: column {column} has no match of `{setting}.pattern` {spec.pattern!r}", "no_answer")
    return found[-1].group(1).strip()


_WORDS_TYPESET = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mbox)\s*\{")
_SENTENCE_END = re.compile(r"[.!?。](?:\s|$)")
_WORD = re.compile(r"[^\W\d_]{2,}")
_LETTER = re.compile(r"[^\W\d_]")   # without one, an answer cannot be words: no second parse


def check_math_gold(answer: str, where: str, column: str, file_column: str, word_answers: bool,
                    renamed: bool = False) -> None:
    """Refuse a gold answer the math verifier cannot check: unparsable, a worked solution (a correct
    boxed answer would score 0 against it), or plain words that are no math value (`proof`,
    `See solution`: `\\boxed{proof}` would earn 1.0). Words the dataset typeset as words
    (`\\text{Evelyn}`, MATH's convention) are answers; bare ones only with `word_answers: true`."""
    from posttrain.rewards.math import GoldAnswerError, check_gold

    shown = short(answer, ECHO)
    instead = f" in place of `columns: {{{file_column}: answer}}`" if renamed else ""
    if "####" in answer:
        raise DatasetError(f"{where}: column {column}: {shown} looks like GSM8K's `#### N` (the worked solution, then "
                           f"the answer), not the answer alone: set `answer_from: {{column: {file_column}, "
                           f"extract: gsm8k}}`{instead}")
    if _BOX_RE.search(answer) or (len(_SENTENCE_END.findall(answer)) >= 2 and len(_WORD.findall(answer)) >= 8):
        raise DatasetError(f"{where}: column {column}: {shown} looks like a worked solution, not a gold answer (a "
                           f"correct \\boxed{{}} reply would score 0 against it): set `answer_from: {{column: "
                           f"{file_column}, extract: boxed}}`{instead} to take its last \\boxed{{}}")
    try:
        check_gold(answer)
    except GoldAnswerError as exc:
        message = str(exc).replace(repr(answer), shown)
        raise RowRefused(f"{where}: column {column}: {message}", "unverifiable_answer") from None
    if not word_answers and _LETTER.search(answer) and not _WORDS_TYPESET.search(answer) and _is_words(answer):
        raise RowRefused(f"{where}: column {column}: {shown} is words, not a value the verifier can check (a reply "
                         f"boxing the same words would earn full marks); set `word_answers: true` on the source if "
                         "such answers are meant", "unverifiable_answer")


def _is_words(answer: str) -> bool:
    """Whether the math verifier reads the answer (or an element of it) as text, not a value."""
    from posttrain.rewards.math.normalise import THOUSANDS_WHOLE_RE
    from posttrain.rewards.math.values import parse_value

    try:
        value = parse_value(answer, bool(THOUSANDS_WHOLE_RE.match(answer.strip())))
    except Exception:   # noqa: BLE001 - check_gold has accepted it; too costly to parse is not words
        return False
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple) and item and item[0] == "text":
            return True
        if isinstance(item, (tuple, list)):
            stack.extend(x for x in item if isinstance(x, (tuple, list)))
    return False


def difficulty(value, where: str, column: str) -> int:
    """A difficulty as reasoning RL's curriculum orders it: an integer (or its text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        number = None
    elif isinstance(value, str):
        number = int(value.strip()) if re.fullmatch(r"\s*[-+]?\d+\s*", value) else None
    else:
        number = int(value) if float(value).is_integer() else None
    if number is not None:
        return number
    digits = re.fullmatch(r"(\D*)(\d+)(\D*)", value) if isinstance(value, str) else None
    example = (_escape(digits.group(1)) + "(\\d+)" + _escape(digits.group(3))).replace("\\", "\\\\") if digits \
        else "<regex with one group>"
    raise DatasetError(f"{where}: column {column} is {short(value, ECHO)}, not an integer (reasoning RL orders its "
                       f"curriculum by it): map it with `values: {{difficulty: \"{example}\"}}` or a dict of "
                       "its values")


def _escape(text: str) -> str:
    """Regex-escaped for a user to read: only the characters that need it (re.escape escapes spaces)."""
    return re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", text)


# ---------------------------------------------------------------- SFT replies


def chat_message(message: dict, where: str, column: str, index: int) -> dict:
    """One {role, content} message as rows keep it; an assistant turn may carry `tool_calls`
    (OpenAI's {"type": "function", "function": {"name", "arguments"}} or a bare {"name", "arguments"},
    arguments as an object or JSON text) with empty content, a `tool` turn its tool's `name`."""
    at = f"{where}: column {column!r} message {index}"
    calls = message.get("tool_calls")
    content = message.get("content")
    if content is None and calls:
        content = ""
    if not isinstance(content, str):
        raise DatasetError(f"{at}: 'content' must be text")
    out = {"role": message["role"], "content": content}
    if calls is not None:
        if message["role"] != "assistant" or not isinstance(calls, list):
            raise DatasetError(f"{at}: 'tool_calls' must be a list, on an assistant message")
        out["tool_calls"] = [_tool_call(c, f"{at} tool call {i}") for i, c in enumerate(calls)]
    if message["role"] == "tool" and isinstance(message.get("name"), str):
        out["name"] = message["name"]
    return out


def _tool_call(call, at: str) -> dict:
    function = call.get("function", call) if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise DatasetError(f"{at}: needs a function name ({{'name': ..., 'arguments': {{...}}}})")
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            raise DatasetError(f"{at}: 'arguments' is text that is not JSON") from None
    if not isinstance(arguments, dict):
        raise DatasetError(f"{at}: 'arguments' must be an object")
    return {"type": "function", "function": {"name": function["name"], "arguments": arguments}}


def sharegpt_turn(message: dict, where: str, column: str) -> dict:
    sender = message.get("from")
    if sender not in SHAREGPT_ROLES:
        raise DatasetError(f"{where}: column {column!r}: a turn from {short(sender, ECHO)}; ShareGPT turns are from "
                           f"{', '.join(SHAREGPT_ROLES)}")
    return {"role": SHAREGPT_ROLES[sender], "content": message.get("value")}


def build_reply(messages: list[dict], row: dict, spec: ReplyFrom, where: str, columns: dict[str, str],
                column: str) -> list[dict]:
    """The conversation with its final assistant reply built by `reply:` (in canonical think form);
    `column` is where the row's own reply is, as messages name it."""
    own = messages[-1]["content"] if messages and messages[-1]["role"] == "assistant" else None
    history = messages[:-1] if own is not None else messages
    if spec.markers is not None:
        if own is None:
            raise DatasetError(f"{where}: column {column}: no assistant reply for `reply.markers` to split")
        text = split_at_markers(own, spec.marker_list(), f"{where}: column {column}")
    else:
        reasoning = _reasoning_text(lookup(row, spec.reasoning, where, "reply.reasoning", columns), where,
                                    origin(spec.reasoning, columns))
        if spec.answer is None:
            if own is None:
                raise DatasetError(f"{where}: column {column}: no assistant reply, and `reply:` no `answer:` column")
            answer = own
        elif isinstance(spec.answer, str):
            answer = lookup(row, spec.answer, where, "reply.answer", columns)
            if not isinstance(answer, str) or not answer.strip():
                raise RowRefused(f"{where}: column {origin(spec.answer, columns)} (the `reply.answer`) is empty",
                                 "no_answer")
        else:
            value = lookup(row, spec.answer.column, where, "reply.answer.column", columns)
            answer = "\\boxed{" + extract_answer(value, spec.answer, where, columns, "reply.answer") + "}"
        text = assemble_response(reasoning, answer.strip())
    return history + [{"role": "assistant", "content": text}]


def _reasoning_text(value, where: str, column: str) -> str:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = "\n\n".join(v.strip() for v in value if v.strip())
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise DatasetError(f"{where}: column {column} (the `reply.reasoning`) must be text or a list of texts, "
                           f"not {type(value).__name__}")
    value = value.strip()
    # Some datasets keep the tags around their reasoning column: one block, not two.
    if value.startswith(THINK_OPEN) and value.endswith(THINK_CLOSE):
        value = value[len(THINK_OPEN):-len(THINK_CLOSE)].strip()
    return value


def split_at_markers(text: str, markers: list[str], where: str) -> str:
    opening, closing, *answer_marks = markers
    if opening not in text or closing not in text.partition(opening)[2]:
        raise RowRefused(f"{where}: the assistant reply has no {opening} ... {closing} block for `reply.markers` "
                         "(a trace cut short?)", "no_think_block")
    reasoning, _, after = text.partition(opening)[2].partition(closing)
    if answer_marks:
        start, end = answer_marks
        after = after.partition(start)[2] if start in after else after
        after = after.rpartition(end)[0] if end in after else after
    if not after.strip():
        raise RowRefused(f"{where}: the assistant reply has nothing after its {closing}", "no_answer")
    return assemble_response(reasoning.strip(), after.strip())


_REASONING_COLUMN = re.compile(r"reason|think|thought|trajector|cot|rationale", re.IGNORECASE)


def _text_size(value) -> int:
    if isinstance(value, str):
        return len(value)
    return sum(len(v) for v in value if isinstance(v, str)) if isinstance(value, list) else 0


def check_think_block(reply: str, where: str, column: str, row: dict) -> None:
    """A thinking-mode SFT reply has a closed think block with reasoning in it; anything else would
    be trained as thinking without any."""
    parsed = parse_response(reply)
    if parsed.think_blocks >= 1 and parsed.closed and visible(parsed.reasoning or ""):
        return
    found = next((m for m in MARKER_PRESETS.values() if m[0] in reply), None)
    elsewhere = sorted((k for k, v in row.items() if _REASONING_COLUMN.search(k) and _text_size(v)),
                       key=lambda k: -_text_size(row[k]))
    if found:
        hint = f"it holds OpenThoughts' {found[0]} markers: set `reply: {{markers: open_thoughts}}`"
    elif elsewhere:
        hint = (f"the row has {elsewhere[0]!r}: set `reply: {{reasoning: {elsewhere[0]}, answer: <its answer "
                f"column>}}`")
    else:
        hint = ("build it with `reply: {reasoning: <column>, answer: {column: <column>, extract: boxed}}`, or set "
                "`thinking: false` on the source if these replies answer without thinking")
    state = "an empty think block" if parsed.closed else "no think block"
    raise RowRefused(f"{where}: column {column}: a thinking-mode reply with {state} ({THINK_OPEN}...{THINK_CLOSE}): "
                     f"{hint}", "no_think_block")
