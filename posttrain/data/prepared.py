"""Prepared data: every data role and evaluation suite of a config, loaded, normalised, checked
and written once as content-addressed JSONL files that stages and evaluation read.

A role's file name carries its content hash, so a stage's cache key (which holds the hashes of
the roles it reads) changes exactly when one of its inputs does, and never when an evaluation
suite or another stage's data changes. All checks (every source readable, mapped columns present,
gold answers parseable, constraints known, no training question overlapping an evaluation item:
posttrain.data.decontamination) run before the first file is written: bad data stops the run before any
work and leaves nothing half-written.
"""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from posttrain.config.pipeline import STAGE_BY_NAME, STAGE_TABLE, PipelineConfig
from posttrain.data.files import DatasetError, dataset_ref, file_md5, write_jsonl
from posttrain.schema import DatasetRef
from posttrain.data.sources import RoleData, load_role

@dataclass
class PreparedData:
    roles: dict[str, DatasetRef] = field(default_factory=dict)
    suites: dict[str, DatasetRef] = field(default_factory=dict)
    loaded: dict[str, RoleData] = field(default_factory=dict)   # role or `eval:<suite>` -> rows, shares

    def for_stage(self, stage: str) -> dict[str, DatasetRef]:
        return {role: self.roles[role] for role in STAGE_BY_NAME[stage].roles if role in self.roles}

    def probe(self, cfg: PipelineConfig) -> DatasetRef | None:
        """The first thinking-mode math suite: what an RL stage's held-out probe watches."""
        math = [s.name for s in cfg.data.suites() if s.kind == "math" and s.mode in ("think", "row")]
        return self.suites[math[0]] if math else None


def load_suites(cfg: PipelineConfig) -> dict[str, list[dict]]:
    root = Path(cfg.root)
    return {s.name: load_role(f"eval:{s.name}", s.sources, root, cfg.seed, row_cache_folder(cfg)).rows
            for s in cfg.data.suites()}


def row_cache_folder(cfg: PipelineConfig) -> Path:
    """Where normalised rows are kept by content (posttrain.data.row_cache), beside the runs."""
    return cfg.path(cfg.paths.runs) / "cache" / "normalised"


def missing_roles(cfg: PipelineConfig, stages: tuple[str, ...] | None = None) -> list[str]:
    """What the selected stages need and the config does not give (optional roles aside)."""
    roles = cfg.data.roles()
    return [f"stage {stage.name} needs data: set `data.{role}` in the config"
            for stage in STAGE_TABLE if stages is None or stage.name in stages
            for role in stage.reads if not roles[role]]


def load_all(cfg: PipelineConfig, stages: tuple[str, ...] | None = None, *, require: bool = True) -> dict[str, RoleData]:
    """Every role the selected stages read, and every evaluation suite, loaded and checked."""
    if require and missing_roles(cfg, stages):
        raise DatasetError(missing_roles(cfg, stages)[0])
    root = Path(cfg.root)
    wanted = {role for stage in STAGE_TABLE if stages is None or stage.name in stages for role in stage.roles}
    loaded = {role: load_role(role, sources, root, cfg.seed, row_cache_folder(cfg))
              for role, sources in cfg.data.roles().items() if sources and role in wanted}
    for suite in cfg.data.suites():
        loaded[f"eval:{suite.name}"] = load_role(f"eval:{suite.name}", suite.sources, root, cfg.seed, row_cache_folder(cfg))
        unchecked = sum(1 for r in loaded[f"eval:{suite.name}"].rows if r["kind"] == "open" and not r.get("constraints"))
        if unchecked:
            raise DatasetError(f"data.eval suite {suite.name!r}: {unchecked} open-ended rows have no `constraints`: "
                               "evaluation gates open-ended replies on an independent check, not on the reward "
                               "model that training pays; give each row its constraints (and answer)")
    check_stage_rewards(cfg, loaded)
    if "preferences" in loaded:
        from posttrain.data.preferences import check_role

        check_role(loaded["preferences"])
    from posttrain.data.decontamination import decontaminate

    decontaminate(loaded, cfg.data.decontamination)   # refuses, or drops and counts (data.decontamination)
    return loaded


def check_stage_rewards(cfg: PipelineConfig, loaded: dict[str, RoleData]) -> None:
    """Every row kind an RL stage reads is paid by one of its weighted rewards (before any work)."""
    from collections import Counter

    from posttrain.rewards import MissingTaskReward, check_task_rewards

    for stage in STAGE_TABLE:
        for role in stage.roles if stage.rewarded else ():
            if role in loaded:
                weights = cfg.stage(stage.name).rewards.model_dump()
                try:
                    check_task_rewards(weights, Counter(r["kind"] for r in loaded[role].rows),
                                       f"stages.{stage.name} (data.{role})")
                except MissingTaskReward as exc:
                    raise DatasetError(str(exc)) from None


def prepare(cfg: PipelineConfig, out_dir: Path, stages: tuple[str, ...] | None = None) -> PreparedData:
    loaded = load_all(cfg, stages)
    prepared = PreparedData(loaded=loaded)
    out_dir.mkdir(parents=True, exist_ok=True)
    for key, data in loaded.items():
        tmp = out_dir / f".{key.replace(':', '-')}.jsonl.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"  # runs in parallel
        write_jsonl(data.rows, tmp)
        final = out_dir / f"{key.replace(':', '-')}-{file_md5(tmp)[:12]}.jsonl"
        tmp.replace(final)
        ref = dataset_ref(final, name=key).model_copy(update={"sources": data.hashes, "dropped": data.dropped})
        if key.startswith("eval:"):
            prepared.suites[key.removeprefix("eval:")] = ref
        else:
            prepared.roles[key] = ref
    return prepared

