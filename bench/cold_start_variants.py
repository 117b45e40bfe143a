"""Cold starts altered on purpose, so that the RL benches give a reward something to remove.

The pipeline's cold start is the world's worked solutions as they are. The benches
(bench/rl_experiments.py `--cold-start KEY=VALUE`) alter a share of them:

- `mixed_language_share`: the steps rendered half in the other language (what R1's
  language-consistency reward is for),
- `double_check_share`: a redundant check appended (what a length reward is for),
- `answer_only_share`: the result stated without the working (what the correctness reward alone
  should teach the policy to stop doing).

Each alteration draws from its own random stream for every row, so a row one alteration leaves
alone is the row the others would give without it. The rows are those of the config's
`data.cold_start` sources (the world's cold_start.jsonl: `messages` rows carrying the problem's
answer, level, op, a, b and language; tool episodes among them are kept as they are); the altered rows go to a content-addressed JSONL file and
`write_variant` returns the config override that points `data.cold_start` at it.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from posttrain.chat import assemble_response, parse_response
from posttrain.config.pipeline import PipelineConfig
from posttrain.data.files import DatasetError, file_md5, write_jsonl
from posttrain.data.sources import SourceConfig, read_source
from posttrain.world.reflection import answer_only, with_check
from posttrain.world.tasks import render_reasoning

WORLD_FIELDS = ("messages", "answer", "op", "a", "b", "language")


@dataclass(frozen=True)
class Variant:
    mixed_language_share: float = 0.0
    double_check_share: float = 0.0
    answer_only_share: float = 0.0

    def __post_init__(self):
        for f in fields(self):
            share = getattr(self, f.name)
            if not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
                raise ValueError(f"{f.name} must be a share between 0 and 1 (got {share!r})")

    @property
    def altered(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def as_dict(self) -> dict[str, float]:
        """The shares that are not zero (what a recorded parent says it was built with)."""
        return {k: v for k, v in asdict(self).items() if v}


SHARES = tuple(f.name for f in fields(Variant))


def split_settings(settings: dict) -> tuple[Variant, dict]:
    """`--cold-start` settings: the alteration shares, and the rest (stages.cold_start_sft overrides)."""
    return (Variant(**{k: v for k, v in settings.items() if k in SHARES}),
            {k: v for k, v in settings.items() if k not in SHARES})


def worked_solution(row: dict, where: str) -> tuple[str, str]:
    """(reasoning, answer sentence) of a world cold-start row's reply."""
    missing = [k for k in WORLD_FIELDS if k not in row]
    if missing:
        raise DatasetError(f"{where}: a cold-start variant needs the world's fields {', '.join(WORLD_FIELDS)} "
                           f"(missing {', '.join(missing)}): alter the embedded world's cold_start.jsonl")
    reply = row["messages"][-1]["content"]
    parsed = parse_response(reply)
    if row["messages"][-1]["role"] != "assistant" or not parsed.reasoning \
            or assemble_response(parsed.reasoning, parsed.answer) != reply:
        raise DatasetError(f"{where}: the last message is not a worked solution (think block, then the answer)")
    return parsed.reasoning, parsed.answer


def alter_rows(rows: list[dict], variant: Variant, seed: int, where: list[str] | None = None
               ) -> tuple[list[dict], dict[str, int]]:
    """The rows with their replies altered, and how many of them each alteration changed."""
    mix, check = random.Random(f"mixed_language/{seed}"), random.Random(f"double_check/{seed}")
    skip = random.Random(f"answer_only/{seed}")
    out, altered = [], {"double_checked": 0, "mixed_language": 0, "answer_only": 0, "tool_episodes_unaltered": 0}
    for i, row in enumerate(rows):
        if row.get("environment"):
            # A tool episode has no worked solution to alter: kept as it is, counted, and drawing
            # nothing, so the world's rows get the same alterations with or without episodes beside them.
            out.append(row)
            altered["tool_episodes_unaltered"] += 1
            continue
        worked, answer = worked_solution(row, where[i] if where else f"row {i}")
        op, a, b, language = row["op"], row["a"], row["b"], row["language"]
        # Every draw is made for every row, so a row one alteration leaves alone is the row the
        # others would give without it.
        reasoning = worked
        if mix.random() < variant.mixed_language_share:
            reasoning = render_reasoning(op, a, b, language, english_step_share=0.5, rng=mix)
        mixed = reasoning != worked   # every step may draw its own language
        checked = check.random() < variant.double_check_share
        if checked:
            reasoning = with_check(reasoning, op, a, b, language)
        if skip.random() < variant.answer_only_share:
            reasoning = answer_only(op, a, b, language)
            altered["answer_only"] += 1
        else:
            altered["mixed_language"] += mixed
            altered["double_checked"] += checked
        reply = {"role": "assistant", "content": assemble_response(reasoning, answer)}
        out.append({**row, "messages": row["messages"][:-1] + [reply]})
    return out, altered


def selected_rows(source: SourceConfig, root: Path) -> tuple[list[dict], list[str]]:
    """A source's rows in our column names, shuffled and limited as the source says (so the
    alteration draws fall on the rows the stage trains on, in its order), and where each came from."""
    raw = read_source(source, root)
    if source.shuffle_seed is not None:
        random.Random(source.shuffle_seed).shuffle(raw)
    if source.limit is not None:
        raw = raw[:source.limit]
    return [{source.columns.get(k, k): v for k, v in r.row.items()} for r in raw], [r.where for r in raw]


def write_variant(cfg: PipelineConfig, variant: Variant, out_dir: Path) -> tuple[dict, dict[str, int]]:
    """Alter the rows of `data.cold_start` and write them under `out_dir`: (the override for
    `load_config` that points `data.cold_start` at them, how many rows each alteration changed)."""
    if not cfg.data.cold_start:
        raise DatasetError("data.cold_start has no source to alter")
    per_source = [selected_rows(source, Path(cfg.root)) for source in cfg.data.cold_start]
    rows = [r for source_rows, _ in per_source for r in source_rows]
    where = [w for _, source_where in per_source for w in source_where]
    # One pass over every source in order: the draws do not depend on how the rows are split.
    altered_rows, counts = alter_rows(rows, variant, cfg.seed, where)
    sources, start = [], 0
    for source, (source_rows, _) in zip(cfg.data.cold_start, per_source):
        part = altered_rows[start:start + len(source_rows)]
        start += len(source_rows)
        tmp = out_dir / ".cold_start.jsonl.tmp-variant"
        write_jsonl(part, tmp)
        final = out_dir / f"cold_start-{file_md5(tmp)[:12]}.jsonl"
        tmp.replace(final)
        # Already shuffled, limited and in our column names: the override reads the file as it is.
        sources.append(source.model_copy(update={
            "path": str(final.absolute()), "hf": None, "hf_config": None, "format": "jsonl", "columns": {},
            "shuffle_seed": None, "limit": None}).model_dump(mode="json", exclude_defaults=True))
    return {"data.cold_start": sources}, {"examples": len(altered_rows), **counts}
