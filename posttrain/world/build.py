"""Build the embedded world: task data, tokenizer, base model and student base.

`dvc.yaml` runs these as `posttrain world <step>` so `dvc repro` rebuilds only what changed; the
pipeline calls `ensure_world`, which runs `dvc repro` for the project's own default layout and the
same functions directly for any other world directory (tests, smoke configs).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from posttrain.config import PipelineConfig
from posttrain.schema import CheckpointRef, DatasetRef
from posttrain.world import tasks

TRAIN_FILES = ("math_train", "direct_train", "instruction_train")
EVAL_FILES = ("eval_math", "eval_no_think", "eval_instruction", "eval_direct")


class DatasetError(ValueError):
    pass


@dataclass(frozen=True)
class WorldPaths:
    root: Path

    @property
    def data(self) -> Path:
        return self.root / "world"

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer"

    @property
    def base(self) -> Path:
        return self.root / "base"

    @property
    def student_base(self) -> Path:
        return self.root / "student_base"

    def file(self, name: str) -> Path:
        return self.data / f"{name}.jsonl"


def file_md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def dataset_ref(path: Path, name: str | None = None) -> DatasetRef:
    rows = sum(1 for _ in open(path, encoding="utf-8"))
    return DatasetRef(name=name or path.stem, path=str(path), md5=file_md5(path), rows=rows)


def write_jsonl(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def read_jsonl(path: Path, required: tuple[str, ...] = ()) -> list[dict]:
    """Rows of a JSON-lines file; a bad row raises DatasetError naming the file and line."""
    if not path.is_file():
        raise DatasetError(f"dataset {path} is missing; build the world with `posttrain world data` or `dvc repro`")
    rows = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{line_no}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}")
            missing = [k for k in required if k not in row]
            if missing:
                raise DatasetError(f"{path}:{line_no}: missing field(s) {', '.join(missing)}")
            rows.append(row)
    return rows


# ---------------------------------------------------------------- build steps


def build_data(cfg: PipelineConfig) -> dict:
    w, seed, paths = cfg.world, cfg.world.seed, WorldPaths(cfg.path(cfg.paths.world))
    train = {
        "math_train": [p.to_row() for p in tasks.math_problems(w.math_train, seed, "train", levels=w.levels)],
        "direct_train": [d.to_row() for d in tasks.direct_tasks(w.direct_train, seed, "train")],
        "instruction_train": [t.to_row() for t in tasks.instruction_tasks(w.instruction_train, seed, "train")],
    }
    evals = {
        "eval_math": [p.to_row() for p in tasks.math_problems(2 * w.eval_math_per_language, seed + 1, "eval", levels=w.levels)],
        "eval_no_think": [p.to_row() for p in tasks.math_problems(w.eval_no_think, seed + 2, "eval", levels=w.levels)],
        "eval_instruction": [t.to_row() for t in tasks.instruction_tasks(w.eval_instruction, seed + 3, "eval")],
        "eval_direct": [d.to_row() for d in tasks.direct_tasks(w.eval_direct, seed + 4, "eval")],
    }
    # The pretraining corpus draws from the same generators with the same seed; include it too.
    train_prompts = [r["question"] for rows in train.values() for r in rows]
    from posttrain.world.corpus import build_corpus, document_question
    corpus_questions = [document_question(doc) for doc in build_corpus(w.corpus, seed)]
    for name, rows in evals.items():
        tasks.check_no_overlap([r["question"] for r in rows], train_prompts + corpus_questions, what=f"in {name}")
    manifest = {}
    for name, rows in {**train, **evals}.items():
        write_jsonl(rows, paths.file(name))
        manifest[name] = {"rows": len(rows), "md5": file_md5(paths.file(name))}
    (paths.data / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def build_tokenizer(cfg: PipelineConfig) -> None:
    from posttrain.world.tokenizer import build_tokenizer as build

    build(WorldPaths(cfg.path(cfg.paths.world)).tokenizer)


def build_base(cfg: PipelineConfig, which: str) -> dict:
    from transformers import AutoTokenizer

    from posttrain.world.pretrain import pretrain

    paths = WorldPaths(cfg.path(cfg.paths.world))
    tokenizer = AutoTokenizer.from_pretrained(paths.tokenizer)
    if which == "teacher":
        arch, train_cfg, out = cfg.base.teacher_architecture, cfg.base.pretrain, paths.base
    else:
        arch, train_cfg, out = cfg.base.student_architecture, cfg.base.student_pretrain, paths.student_base
    ref, metrics = pretrain(tokenizer, arch, cfg.world.corpus, train_cfg, out, cfg.world.seed)
    (out.parent / f"{out.name}.metrics.json").write_text(json.dumps(metrics, indent=2))
    return metrics


# ---------------------------------------------------------------- used by the pipeline


def world_ready(cfg: PipelineConfig) -> bool:
    paths = WorldPaths(cfg.path(cfg.paths.world))
    needed = [paths.file(n) for n in TRAIN_FILES + EVAL_FILES] + [paths.tokenizer / "tokenizer.json"]
    if cfg.base.model == "embedded":
        needed.append(paths.base / "config.json")
    if cfg.base.student == "embedded":
        needed.append(paths.student_base / "config.json")
    return all(p.exists() for p in needed)


def ensure_world(cfg: PipelineConfig, log=print) -> None:
    """Build whatever of the world is missing or stale: via `dvc repro` in the project layout (so an
    edited generator or `world:` setting rebuilds what depends on it), else directly."""
    root = Path(cfg.root)
    if (root / "dvc.yaml").exists() and cfg.path(cfg.paths.world) == (root / "data").absolute() \
            and (root / ".dvc").is_dir():
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        stale = _dvc_stale_stages(root, env)
        if world_ready(cfg) and not stale:
            return
        reason = f"out of date ({', '.join(stale)})" if stale else "missing"
        log(f"world or base model {reason}: running `dvc repro` (tokenizer, data, base pretraining)")
        subprocess.run([sys.executable, "-m", "dvc", "repro"], cwd=root, check=True, env=env)
        if world_ready(cfg):
            return
    elif world_ready(cfg):
        return
    log("building the embedded world directly")
    build_data(cfg)
    build_tokenizer(cfg)
    if cfg.base.model == "embedded":
        build_base(cfg, "teacher")
    if cfg.base.student == "embedded":
        build_base(cfg, "student")


def _dvc_stale_stages(root: Path, env: dict) -> list[str]:
    """Stages of dvc.yaml whose code, params or outputs changed (empty if dvc cannot tell)."""
    result = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], cwd=root, env=env,
                            capture_output=True, text=True)
    if result.returncode != 0:
        return []
    try:
        return sorted(json.loads(result.stdout or "{}"))
    except json.JSONDecodeError:
        return []


def base_checkpoint(cfg: PipelineConfig, which: str = "teacher") -> CheckpointRef:
    """The starting checkpoint: the embedded base, or the configured real model (HF id / path)."""
    from posttrain.checkpoint import directory_digest

    paths = WorldPaths(cfg.path(cfg.paths.world))
    location = cfg.base.model if which == "teacher" else cfg.base.student
    if location == "embedded":
        directory = paths.base if which == "teacher" else paths.student_base
        if not (directory / "config.json").exists():
            raise FileNotFoundError(f"base model {directory} is missing; build it with `dvc repro` "
                                    f"(or `posttrain world base --which {which}`)")
        return CheckpointRef(path=str(directory), digest=directory_digest(directory))
    local = Path(location)
    if local.is_dir():
        return CheckpointRef(path=str(local.absolute()), digest=directory_digest(local))
    return CheckpointRef(path=location, digest=f"hub:{location}")


# Each stage draws its training problems from its own share of a pool, so stages do not train on
# one another's prompts (fractions of the pool, so a small smoke world works the same way).
POOL_SHARES = {"cold_start": (0.0, 0.1), "reasoning_rl": (0.1, 0.55), "rejection_sampling": (0.55, 0.7),
               "mode_fusion": (0.7, 0.8), "general_rl": (0.8, 0.9), "distillation": (0.9, 1.0)}


def pool_share(rows: list[dict], stage: str) -> list[dict]:
    low, high = POOL_SHARES[stage]
    return rows[int(low * len(rows)):int(high * len(rows))]
