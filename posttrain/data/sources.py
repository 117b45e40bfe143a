"""Data sources: where each role of the pipeline gets its rows, in the forms users already have.

A source is a local file or directory (JSONL, JSON, parquet, CSV, an Arrow `save_to_disk`
directory) or a Hugging Face dataset id (through `datasets.load_dataset`, so a local HF cache works
offline), with a `columns` mapping from the user's names to ours, and optional `split`, `limit`,
`shuffle_seed` and `weight` (a share of the role's rows when a role mixes several sources), and the
declarative transforms of posttrain.data.transforms for datasets as they are published (`values`,
`answer_from`, `reply`, `drop`, dotted `columns` paths, ShareGPT turns; code tests: `tests_from`,
posttrain.data.code_tests).

Every row is normalised into one of three shapes, whatever form it came in (TRL's standard formats
are accepted as they are: conversational `messages`, `prompt` / `completion` plain or
conversational, prompt-only with extra columns):

- an SFT row (roles `cold_start`, `thinking`, `non_reasoning`):
  ``{"messages": [..., {"role": "assistant", ...}], "thinking": bool | None, "language": str}``
- a prompt row (roles `*_prompts` and evaluation suites):
  ``{"prompt": [...messages ending with the user turn], "kind": "math" | "instruction" | "code" |
  "direct", "answer" | "constraints" | "tests": ..., "language": str, "thinking": bool | None}``
- a preference pair (role `preferences`): TRL's explicit-prompt form, posttrain.data.preferences

`thinking` is the mode switch to render (True: /think, False: /no_think, None: none, the prompt
says it in words). The user turn holds the bare question: the chat module renders the switch the
way the model family expects. Bad data raises DatasetError naming file, line (or row) and column,
before anything is written.
"""
from __future__ import annotations

import json
import random
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from posttrain.agents.episodes import trajectory_fields
from posttrain.chat import THINK_OPEN, assemble_response
from posttrain.data import code_tests as test_forms
from posttrain.data import row_cache, transforms
from posttrain.data.files import (
    MAX_ROW_BYTES,
    DatasetError,
    check_regular,
    jsonl_rows,
    parse_json_row,
)
from posttrain.data.task_fields import task_fields
from posttrain.data.transforms import (
    AnswerFrom,
    DropReason,
    MapValue,
    ReplyFrom,
    RowRefused,
)
from posttrain.rewards import TASK_KINDS, unguarded_code_rows

TaskKind = Literal[TASK_KINDS]   # the kinds that have a verifier (posttrain.rewards.TASKS)
SFT_ROLES = ("cold_start", "thinking", "non_reasoning")
PROMPT_ROLES = ("reasoning_prompts", "rejection_prompts", "general_prompts", "distillation_prompts")
# Which mode an SFT row is in when its source does not say: cold-start and extra thinking traces
# think; non-reasoning data answers directly (Qwen3 sec. 4.3).
ROLE_THINKING = {"cold_start": True, "thinking": True, "non_reasoning": False}
FORMATS = ("jsonl", "json", "parquet", "csv", "arrow")


class SourceConfig(BaseModel):
    """One data source of a role. Exactly one of `path` (local file or directory) and `hf` (a dataset
    id for `datasets.load_dataset`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    path: str | None = None
    hf: str | None = None
    hf_config: str | None = None           # the dataset's configuration name
    revision: str | None = None            # hf: a tag, branch or commit of the dataset (in the label)
    split: str = "train"                   # split of an HF id or of a DatasetDict directory
    format: Literal["auto", "jsonl", "json", "parquet", "csv", "arrow"] = "auto"
    # The user's column name -> ours (e.g. {problem: prompt}); a dotted path reads a nested field,
    # through JSON text too ({verification_info.test_cases: tests}).
    columns: dict[str, str] = {}
    # Column (as named after `columns:`) -> {their value: ours} or a regex whose one group is the
    # value ({difficulty: "Level (\\d+)"}).
    values: dict[str, dict[str, MapValue] | str] = {}
    answer_from: AnswerFrom | None = None  # prompt roles: {column, extract: gsm8k | boxed | regex, pattern}
    reply: ReplyFrom | None = None         # SFT roles: {reasoning, answer} columns, or {markers: open_thoughts}
    drop: list[DropReason] = []            # reasons whose rows are dropped and counted, not refused
    word_answers: bool = False             # math gold answers that are plain words (yes / no) are meant
    kind: TaskKind | None = None           # task kind of rows that have no `kind` column
    language: str | None = None            # language of rows that have no `language` column
    thinking: bool | None = None           # mode of rows that have no `thinking` column
    limit: int | None = Field(None, ge=1)  # first N rows (after shuffling, when shuffle_seed is set)
    shuffle_seed: int | None = Field(None, ge=0)
    weight: float | None = Field(None, gt=0)
    max_row_bytes: int = Field(MAX_ROW_BYTES, ge=1)   # a larger row (JSONL line) is refused, naming this
    tests_from: test_forms.TestsFrom | None = None     # code tests as published: {format: mbpp | humaneval | ...}
    forgeable_tests: test_forms.ForgeablePolicy = "refuse"   # run_in_child: accept assert programs (code_test_forms)

    _values = field_validator("values", mode="before")(lambda cls, v: transforms.check_value_maps(v))
    _columns = field_validator("columns")(lambda cls, v: transforms.check_columns(v))

    @model_validator(mode="after")
    def _one_location(self):
        if (self.path is None) == (self.hf is None):
            raise ValueError("a data source needs exactly one of `path` (local file or directory) and `hf` "
                             "(a Hugging Face dataset id)")
        if self.revision is not None and self.hf is None:
            raise ValueError("`revision:` picks a version of an `hf:` dataset; a local `path` has none")
        onto_answer = [k for k, v in self.columns.items() if v == "answer"]
        if self.answer_from and onto_answer and self.answer_from.column != "answer":
            raise ValueError(f"`columns:` maps {onto_answer[0]!r} onto 'answer', which `answer_from` writes")
        test_forms.check_source(self)
        return self

    @property
    def label(self) -> str:
        if self.path is not None:
            return self.path
        return (f"hf:{self.hf}" + (f"/{self.hf_config}" if self.hf_config else "")
                + (f"@{self.revision}" if self.revision else "") + f"[{self.split}]")

    def transform_summary(self) -> str | None:
        """The transforms it sets, as `data check` and the run log show them (one line of JSON)."""
        said = self.model_dump(mode="json", include={"values", "answer_from", "reply", "drop", "word_answers",
                                                          "tests_from", "forgeable_tests"},
                               exclude_defaults=True, exclude_none=True)
        return json.dumps(said, ensure_ascii=False) if said else None


def _as_list(value):
    """A role takes one source or a list of them."""
    return [value] if isinstance(value, dict) else value


SourceList = list[SourceConfig]


@dataclass
class LocatedRow:
    row: dict
    where: str  # "file:line" or "file row N": what an error message names


@dataclass
class RoleData:
    rows: list[dict]
    shares: dict[str, float] = field(default_factory=dict)   # realised share of each source
    notes: list[str] = field(default_factory=list)           # upsampling and other things to log
    hashes: dict[str, str] = field(default_factory=dict)     # each source's content hash (lineage)
    dropped: dict[str, int] = field(default_factory=dict)    # rows dropped by the sources' `drop:`, per reason
    origins: dict[int, str] = field(default_factory=dict)    # id(row) -> where it was read (upsampled copies share it)


_GLOB = re.compile(r"[*?\[]")


def source_hash(source: SourceConfig, root: Path) -> str:
    """Content hash of a local source (md5 of the file, or of its files' names and hashes for a
    directory), or the fingerprint `datasets` gives an HF dataset."""
    from posttrain.data.files import file_md5

    if source.hf is not None:
        from datasets import load_dataset

        return "hf:" + load_dataset(source.hf, source.hf_config, split=source.split,
                                    revision=source.revision)._fingerprint
    paths = source_paths(source, root)
    if len(paths) == 1 and paths[0].is_file():
        return file_md5(paths[0])
    import hashlib

    h = hashlib.md5()
    for path in paths:
        base = path.parent if path.is_file() else path
        for file in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(f"{file.relative_to(base)}:{file_md5(file)}".encode())
    return h.hexdigest() + (".dir" if len(paths) == 1 else f".{len(paths)}files")


def source_paths(source: SourceConfig, root: Path) -> list[Path]:
    """What a local source names: its file or Arrow folder, or the sorted matches of a glob pattern
    (`data/train-*.parquet`: datasets are published in shards), each a regular file."""
    path = Path(source.path)
    if not _GLOB.search(source.path):
        path = path if path.is_absolute() else root / path
        if not path.exists():
            raise DatasetError(f"{source.path}: data source does not exist (resolved to {path})")
        check_regular(path)
        return [path]
    matches = sorted(Path(path.anchor).glob(str(path.relative_to(path.anchor))) if path.is_absolute()
                     else root.glob(source.path))
    if not matches:
        raise DatasetError(f"{source.path}: the pattern matches no file (under {root if not path.is_absolute() else '/'})")
    for match in matches:
        check_regular(match)
    return matches


# ---------------------------------------------------------------- reading any format


def _detect_format(path: Path) -> str:
    if path.is_dir():
        return "arrow"
    suffix = path.suffix.lower()
    return {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet",
            ".pq": "parquet", ".csv": "csv", ".arrow": "arrow"}.get(suffix, "")


def read_source(source: SourceConfig, root: Path) -> list[LocatedRow]:
    """Raw rows of one source, each with where it came from."""
    if source.hf is not None:
        return _read_hf(source)
    return [row for path in source_paths(source, root) for row in _read_path(path, source)]


def _read_path(path: Path, source: SourceConfig) -> list[LocatedRow]:
    fmt = source.format if source.format != "auto" else _detect_format(path)
    if not fmt:
        raise DatasetError(f"{path}: cannot tell the format from the name; set `format:` to one of {', '.join(FORMATS)}")
    if fmt == "jsonl":
        return [LocatedRow(r, f"{path}:{i}") for i, r in jsonl_rows(path, source.max_row_bytes)]
    if fmt == "json":
        return _bounded(_read_json(path), source.max_row_bytes)
    from datasets import Dataset, DatasetDict, load_from_disk

    try:
        if fmt == "parquet":
            data = Dataset.from_parquet(str(path), keep_in_memory=True)
        elif fmt == "csv":
            data = Dataset.from_csv(str(path), keep_in_memory=True)
        else:
            data = load_from_disk(str(path), keep_in_memory=True)
            if isinstance(data, DatasetDict):
                if source.split not in data:
                    raise DatasetError(f"{path}: no split {source.split!r} (has {', '.join(data)})")
                data = data[source.split]
    except DatasetError:
        raise
    except Exception as exc:  # the libraries' own errors vary by format; say which file failed
        raise DatasetError(f"{path}: cannot read as {fmt} ({type(exc).__name__}: {exc})") from None
    # CSV: the header is line 1, so data row i sits on line i + 2.
    where = (lambda i: f"{path}:{i + 2}") if fmt == "csv" else (lambda i: f"{path} row {i}")
    return _bounded([LocatedRow(dict(r), where(i)) for i, r in enumerate(data)], source.max_row_bytes)


def _bounded(rows: list[LocatedRow], max_row_bytes: int) -> list[LocatedRow]:
    """Refuse a row over the source's `max_row_bytes` (as JSON text), naming where it is."""
    for r in rows:
        size = len(json.dumps(r.row, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))
        if size > max_row_bytes:
            raise DatasetError(f"{r.where}: a row of {size} bytes, more than {max_row_bytes}; raise the source's "
                               "`max_row_bytes` if rows this large are meant")
    return rows


def _read_json(path: Path) -> list[LocatedRow]:
    data = parse_json_row(path.read_bytes(), str(path), whole_file=True)
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of objects (or {{\"data\": [...]}})")
    rows = []
    for i, row in enumerate(data):
        if not isinstance(row, dict):
            raise DatasetError(f"{path} row {i}: expected a JSON object, got {type(row).__name__}")
        rows.append(LocatedRow(row, f"{path} row {i}"))
    return rows


def _read_hf(source: SourceConfig) -> list[LocatedRow]:
    from datasets import load_dataset

    try:
        data = load_dataset(source.hf, source.hf_config, split=source.split, revision=source.revision)
    except Exception as exc:
        raise DatasetError(f"hf:{source.hf}: cannot load split {source.split!r}"
                           f"{f' of config {source.hf_config!r}' if source.hf_config else ''}"
                           f"{f' at revision {source.revision!r}' if source.revision else ''} ({type(exc).__name__}: "
                           f"{exc}); offline, the dataset must already be in the local Hugging Face cache") from None
    return [LocatedRow(dict(r), f"{source.label} row {i}") for i, r in enumerate(data)]


# ---------------------------------------------------------------- normalising rows


def _mapped(raw: dict, source: SourceConfig, where: str) -> dict:
    """The row with `columns:` and `values:` applied (posttrain.data.transforms)."""
    row = transforms.rename(raw, source.columns, where)
    transforms.map_values(row, source.values, where, source.columns)
    return row


def _messages(value, where: str, column: str) -> list[dict]:
    """A list of {role, content} messages (or ShareGPT {from, value} turns), given as such or as JSON."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise DatasetError(f"{where}: column {column!r} is text, not a list of messages") from None
    if isinstance(value, list):
        value = [transforms.sharegpt_turn(m, where, column) if isinstance(m, dict) and "from" in m and "role" not in m
                 else m for m in value]
    if not isinstance(value, list) or not value or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and (isinstance(m.get("content"), str) or m.get("tool_calls"))
            for m in value):
        raise DatasetError(f"{where}: column {column!r} must be a non-empty list of {{role, content}} messages")
    return [transforms.chat_message(m, where, column, i) for i, m in enumerate(value)]


def _turns(value, where: str, column: str, role: str) -> list[dict]:
    """A prompt or completion: plain text (one turn of `role`) or a list of messages."""
    if isinstance(value, str):
        if not value.strip():
            raise DatasetError(f"{where}: column {column!r} is empty")
        return [{"role": role, "content": value}]
    return _messages(value, where, column)


def _bool_or_none(value, where: str, column: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().casefold()
    if text in ("true", "1", "yes", "think", "thinking"):
        return True
    if text in ("false", "0", "no", "no_think", "non_thinking"):
        return False
    if text in ("", "none", "null"):
        return None
    raise DatasetError(f"{where}: column {column!r} must be true, false or empty (got {value!r})")


def detect_language(text: str) -> str:
    """"zh" when CJK characters outnumber Latin words, else "en" (the two scripts the language
    reward tells apart); a `language` column or the source's `language:` overrides it."""
    from posttrain.rewards.language import word_counts

    latin, cjk, _ = word_counts(text)
    return "zh" if cjk > latin else "en"


def _language(row: dict, source: SourceConfig, text: str) -> str:
    value = row.get("language") or source.language
    return str(value) if value else detect_language(text)


def _conversation(row: dict, source: SourceConfig, where: str) -> tuple[list[dict], str]:
    """The row's turns and the column its reply comes from: `messages`, ShareGPT `conversations`,
    or `prompt` + `completion` (a `prompt` alone when `reply:` builds the reply)."""
    if "messages" in row:
        return _messages(row["messages"], where, "messages"), "messages"
    if "conversations" in row:
        return _messages(row["conversations"], where, "conversations"), "conversations"
    if "prompt" in row and ("completion" in row or source.reply is not None):
        turns = _turns(row["prompt"], where, "prompt", "user")
        if "completion" in row:
            turns += _turns(row["completion"], where, "completion", "assistant")
        return turns, "completion"
    raise DatasetError(f"{where}: an SFT row needs a `messages` column or `prompt` and `completion` columns "
                       f"(has {', '.join(sorted(row)) or 'none'}; map yours with `columns:`)")


def normalise_sft(raw: dict, source: SourceConfig, where: str, role: str) -> dict:
    row = _mapped(raw, source, where)
    messages, column = _conversation(row, source, where)
    if source.reply is not None:
        messages = transforms.build_reply(messages, row, source.reply, where, source.columns,
                                          transforms.origin(column, source.columns))
        column = source.reply.reasoning or column   # what an empty built reasoning is to be blamed on
    if messages[-1]["role"] != "assistant" or not messages[-1]["content"].strip():
        raise DatasetError(f"{where}: column {column!r}: the last message must be a non-empty assistant reply")
    if not any(m["role"] == "user" for m in messages):
        raise DatasetError(f"{where}: column {column!r}: no user turn")
    thinking = _bool_or_none(row["thinking"], where, "thinking") if "thinking" in row else (
        source.thinking if source.thinking is not None else ROLE_THINKING[role])
    reply = messages[-1]["content"]
    if thinking is True:
        transforms.check_think_block(reply, where, transforms.origin(column, source.columns), row)
    if thinking is False and THINK_OPEN not in reply:
        # Non-thinking replies keep an empty think block (Qwen3), so the mode is visible in the reply.
        messages[-1] = {"role": "assistant", "content": assemble_response("", reply)}
    user_text = " ".join(m["content"] for m in messages if m["role"] == "user")
    out = {"messages": messages, "thinking": thinking, "language": _language(row, source, user_text),
           **trajectory_fields(row, messages, lambda problem: DatasetError(f"{where}: {problem}"))}
    for key in ("id", "kind", "source"):
        if key in row and row[key] is not None:
            out[key] = row[key]
    return out


def normalise_prompt(raw: dict, source: SourceConfig, where: str) -> dict:
    row = _mapped(raw, source, where)
    if source.answer_from is not None:
        value = transforms.lookup(row, source.answer_from.column, where, "answer_from.column", source.columns)
        row["answer"] = transforms.extract_answer(value, source.answer_from, where, source.columns)
    if source.tests_from is not None:
        test_forms.apply(row, source, where)
    if "prompt" in row:
        prompt = _turns(row["prompt"], where, "prompt", "user")
    elif "messages" in row or "conversations" in row:
        column = "messages" if "messages" in row else "conversations"
        prompt = _messages(row[column], where, column)
        if prompt[-1]["role"] == "assistant":
            prompt = prompt[:-1]
    else:
        raise DatasetError(f"{where}: a prompt row needs a `prompt` (or `messages`) column "
                           f"(has {', '.join(sorted(raw)) or 'none'}; map yours with `columns:`)")
    if not prompt or prompt[-1]["role"] != "user":
        raise DatasetError(f"{where}: column 'prompt' must end with a user turn")
    kind = row.get("kind") or source.kind
    if kind not in TASK_KINDS:
        said = f"column 'kind' is {kind!r}" if row.get("kind") else "the row has no `kind` column and its source no `kind:`"
        raise DatasetError(f"{where}: {said}; each prompt row needs a task kind, one of "
                           f"{', '.join(TASK_KINDS)} (a `kind` column, or `kind:` on the source)")
    out = {"prompt": prompt, "kind": kind,
           "thinking": _bool_or_none(row["thinking"], where, "thinking") if "thinking" in row else source.thinking,
           "language": _language(row, source, prompt[-1]["content"])}
    out.update(task_fields(kind, row, where, source))
    for key in ("id", "difficulty", "group", "source"):
        if key in row and row[key] is not None:
            out[key] = row[key]
    if "difficulty" in out:
        column = transforms.origin("difficulty", source.columns)
        out["difficulty"] = transforms.difficulty(out["difficulty"], where, column)
    return out


def load_role(role: str, sources: list[SourceConfig], root: Path, seed: int, cache: Path | None = None) -> RoleData:
    """Every source of a role normalised (or read back from `cache`: posttrain.data.row_cache), then
    mixed: without weights, concatenated in order; with weights (all or none), each source gets
    round(total * w / sum(w)) of the sources' total rows, drawn with the seed (upsampled, said in `notes`)."""
    per_source: list[tuple[SourceConfig, list[dict]]] = []
    notes, dropped, origins, hashes = [], Counter(), {}, {}
    for source in sources:
        _check_role_transforms(role, source)
        done = row_cache.normalised(role, source.model_dump_json(exclude={"weight"}), root, source_hash(source, root),
                                    cache, lambda: _normalise_source(role, source, root))
        origins.update((id(row), where) for row, where in zip(done.rows, done.wheres))
        notes.extend(done.notes)
        dropped.update(done.dropped)
        hashes[source.label] = done.content_hash
        per_source.append((source, done.rows))
    weights = [s.weight for s, _ in per_source]
    if any(w is not None for w in weights) and not all(w is not None for w in weights):
        raise DatasetError(f"role {role!r}: give every source a `weight`, or none")
    if not per_source:
        return RoleData([])
    total = sum(len(rows) for _, rows in per_source)
    if weights[0] is None:
        rows = [r for _, source_rows in per_source for r in source_rows]
        return RoleData(rows, {s.label: len(r) / total for s, r in per_source}, notes, hashes, dict(dropped), origins)
    rng = random.Random(f"{role}/{seed}")
    mixed, counts = [], {}
    for source, source_rows in per_source:
        want = round(total * source.weight / sum(weights))
        full, rest = divmod(want, len(source_rows))
        drawn = source_rows * full + rng.sample(source_rows, rest)
        if full:
            notes.append(f"role {role!r}: {source.label} upsampled {want / len(source_rows):.2f}x "
                         f"({len(source_rows)} rows -> {want})")
        counts[source.label] = len(drawn)
        mixed.extend(drawn)
    rng.shuffle(mixed)
    return RoleData(mixed, {k: v / max(1, len(mixed)) for k, v in counts.items()}, notes, hashes, dict(dropped), origins)


def _normalise_source(role: str, source: SourceConfig, root: Path) -> row_cache.NormalisedSource:
    raw = read_source(source, root)
    if source.shuffle_seed is not None:
        random.Random(source.shuffle_seed).shuffle(raw)
    if source.limit is not None:
        raw = raw[:source.limit]
    if not raw:
        raise DatasetError(f"{source.label}: data source of role {role!r} is empty")
    normalise = (lambda r, w: normalise_sft(r, source, w, role)) if role in SFT_ROLES else (
        lambda r, w: normalise_prompt(r, source, w))
    if role == "preferences":   # TRL's preference formats
        from posttrain.data.preferences import normaliser
        normalise = normaliser(source)
    done = row_cache.NormalisedSource([], [], read=len(raw))
    gone: Counter = Counter()
    for r in raw:
        try:
            done.rows.append(normalise(r.row, r.where))
            done.wheres.append(r.where)
        except RowRefused as exc:
            if exc.reason not in source.drop:
                raise
            gone[exc.reason] += 1
    if source.transform_summary():
        done.notes.append(f"role {role!r}: {source.label} transforms {source.transform_summary()}")
    done.notes.extend(n for n in [test_forms.source_note(role, source, done.rows)] if n)
    if gone:
        counts = ", ".join(f"{reason} {n}" for reason, n in sorted(gone.items()))
        if not done.rows:
            raise DatasetError(f"{source.label}: no row of role {role!r} is left: `drop:` dropped all "
                               f"{len(raw)} ({counts})")
        done.notes.append(f"role {role!r}: {source.label} dropped {sum(gone.values())} of {len(raw)} rows ({counts})")
        done.dropped = dict(gone)
    return done


def _check_role_transforms(role: str, source: SourceConfig) -> None:
    """A transform the role would not use is refused, not ignored."""
    if role in SFT_ROLES and source.answer_from is not None:
        raise DatasetError(f"{source.label}: `answer_from:` gives prompt rows their gold answer; role {role!r} holds "
                           "SFT rows (an answer in the reply: `reply: {reasoning: ..., answer: {column: ..., "
                           "extract: ...}}`)")
    test_forms.check_role(role, source, prompt_role=role in PROMPT_ROLES or role.startswith("eval:"))
    if role not in SFT_ROLES and source.reply is not None:
        raise DatasetError(f"{source.label}: `reply:` builds SFT replies; role {role!r} holds prompts (a gold answer: "
                           "`answer_from:`)")


# ---------------------------------------------------------------- contamination


def normalised_question(text: str) -> str:
    """The question as compared for train/eval overlap: NFKC, case-folded, punctuation and spacing
    removed, the mode-switch suffixes dropped."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"/(no_)?think\b", " ", text)
    return re.sub(r"[\W_]+", "", text)


def question_of(row: dict) -> str:
    turns = row.get("prompt") or row.get("messages") or []
    if isinstance(turns, str):   # a preference row in standard text form
        return turns
    users = [m["content"] for m in turns if m["role"] == "user"]
    return users[-1] if users else ""


def role_summary(rows: list[dict]) -> dict:
    """What `posttrain data check` prints for a role: rows per kind and language, duplicates."""
    questions = Counter(normalised_question(question_of(r)) for r in rows)
    return {"rows": len(rows),
            "kinds": dict(Counter(r.get("kind", "preference" if "chosen" in r else "sft") for r in rows)),
            "languages": dict(Counter(r.get("language", "?") for r in rows)),
            "modes": dict(Counter({True: "think", False: "no_think", None: "none"}[r.get("thinking")] for r in rows)),
            "duplicates": sum(c - 1 for c in questions.values() if c > 1),
            **({"code_without_held_out_tests": note} if (note := unguarded_code_rows(rows)) else {}),
            **({"code_with_forgeable_tests": note} if (note := test_forms.forgeable_code_rows(rows)) else {})}
