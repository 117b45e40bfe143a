"""Build the embedded world: task data, tokenizer, base model and student base.

`dvc.yaml` runs these as `posttrain world <step>` so `dvc repro` rebuilds only what changed; the
pipeline calls `ensure_world`, which runs `dvc repro` for the project's own default layout and the
same functions directly for any other world directory (tests, smoke configs).
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from posttrain.chat import assemble_response
from posttrain.config.pipeline import PipelineConfig
from posttrain.data.files import file_md5, write_jsonl
from posttrain.schema import CheckpointRef
from posttrain.world import open_tasks, tasks, tool_tasks

# The files the world provides, in the standard formats any user source has (posttrain.data.sources):
# SFT rows (`messages`) and prompt rows (`prompt`, `kind`, `answer` / `constraints`, `language`,
# `thinking`). configs/default.yaml points each data role at them like any user config would.
# Each file and the data role configs/default.yaml reads it as.
FILE_ROLES = {"cold_start": "cold_start", "reasoning_prompts": "reasoning_prompts", "rejection_prompts": "rejection_prompts",
              "non_reasoning_direct": "non_reasoning", "non_reasoning_instruction": "non_reasoning",
              "non_reasoning_math": "non_reasoning", "general_instruction_prompts": "general_prompts",
              "general_math_prompts": "general_prompts", "distillation_math_prompts": "distillation_prompts",
              "distillation_instruction_prompts": "distillation_prompts", "open_demonstrations": "thinking",
              "preferences": "preferences", "general_open_prompts": "general_prompts",
              "distillation_open_prompts": "distillation_prompts", "tool_demonstrations": "cold_start",
              "fusion_tool_demonstrations": "thinking", "general_tool_prompts": "general_prompts"}
ROLE_FILES = tuple(FILE_ROLES)
EVAL_FILES = ("eval_math", "eval_no_think", "eval_instruction", "eval_direct", "eval_open", "eval_tool", "eval_tool_bare")
# The world's judge: SFT rows and its held-out rows (bench/world_judge.py trains and measures it).
JUDGE_FILES = ("judge_sft", "eval_judge")


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


# ---------------------------------------------------------------- build steps


def build_data(cfg: PipelineConfig) -> dict:
    w, seed, paths = cfg.world, cfg.world.seed, WorldPaths(cfg.path(cfg.paths.world))
    math = [p.to_row() for p in tasks.math_problems(w.math_train, seed, "train", levels=w.levels)]
    direct = [d.to_row() for d in tasks.direct_tasks(w.direct_train, seed, "train")]
    instruction = [t.to_row() for t in tasks.instruction_tasks(w.instruction_train, seed, "train")]
    evals = {
        "eval_math": [p.to_row() for p in held_out_math(cfg)],
        "eval_no_think": [p.to_row() for p in tasks.math_problems(w.eval_no_think, seed + 2, "eval", levels=w.levels)],
        "eval_instruction": [t.to_row() for t in tasks.instruction_tasks(w.eval_instruction, seed + 3, "eval")],
        "eval_direct": [d.to_row() for d in tasks.direct_tasks(w.eval_direct, seed + 4, "eval")],
        "eval_open": [asdict(t) for t in open_tasks.equation_tasks(w.eval_open, seed + 43, "eval", w.levels)],
    }
    # The pretraining corpus draws from the same generators with the same seed; include it too.
    equations = open_tasks.equation_tasks(w.open_train, seed + 41, "train", w.levels)
    train_prompts = [r["question"] for rows in (math, direct, instruction) for r in rows] + [t.question for t in equations]
    from posttrain.world.corpus import build_corpus, document_question
    corpus_questions = [document_question(doc) for doc in build_corpus(w.corpus, seed)]
    tools, held_out_tools = tool_tasks.tool_tasks(w.tool_train, seed + 51, "train"), tool_tasks.tool_tasks(w.eval_tool, seed + 53, "eval")
    train_prompts += [t.question for t in tools]
    evals["eval_tool"] = [{"question": t.question} for t in held_out_tools]
    for name, rows in evals.items():
        tasks.check_no_overlap([r["question"] for r in rows], train_prompts + corpus_questions, what=f"in {name}")
    files = {
        "cold_start": [_trace(p, thinking=True) for p in pool_share(math, "cold_start_sft")],
        "reasoning_prompts": [_math_prompt(p, True) for p in pool_share(math, "reasoning_rl")],
        "rejection_prompts": [_math_prompt(p, True) for p in pool_share(math, "rejection_sampling")],
        "non_reasoning_direct": [_sft(d, assemble_response("", d["answer"]), False) for d in pool_share(direct, "mode_fusion_sft")],
        "non_reasoning_instruction": [_sft(t, t["gold_response"], tasks.instruction_mode(t))
                                      for t in pool_share(instruction, "mode_fusion_sft")],
        "non_reasoning_math": [_trace(p, thinking=False) for p in pool_share(math, "mode_fusion_sft")],
        "general_instruction_prompts": [_instruction_prompt(t) for t in pool_share(instruction, "general_rl")],
        # 30% of general RL's math asks /no_think (any prefix keeps the share), so RL trains the
        # switch learnt in fusion instead of eroding it.
        "general_math_prompts": [_math_prompt(p, i % 10 >= 3) for i, p in enumerate(pool_share(math, "general_rl"))],
        # 40% of the student's math asks /no_think: with fewer, the 1M student loses the switch.
        "distillation_math_prompts": [_math_prompt(p, i % 5 > 1) for i, p in enumerate(pool_share(math, "distillation"))],
        "distillation_instruction_prompts": [_instruction_prompt(t) for t in pool_share(instruction, "distillation")],
        "eval_math": [_math_prompt(p, True) for p in evals["eval_math"]],
        "eval_no_think": [_math_prompt(p, False) for p in evals["eval_no_think"]],
        "eval_instruction": [_instruction_prompt(t) for t in evals["eval_instruction"]],
        "eval_direct": [{"prompt": d["question"], "kind": "direct", "answer": d["answer"], "language": d["language"],
                         "thinking": False, "id": d["id"]} for d in evals["eval_direct"]],
        **open_files(equations, seed),
        "eval_open": [open_tasks.prompt_row(open_tasks.EquationTask(**t)) for t in evals["eval_open"]],
        "eval_judge": open_tasks.judge_rows([open_tasks.EquationTask(**t) for t in evals["eval_open"]], seed + 47),
        "tool_demonstrations": [t.demonstration() for t in pool_share(tools, "cold_start_sft", TOOL_POOL_SHARES)],
        "fusion_tool_demonstrations": [t.demonstration() for t in pool_share(tools, "mode_fusion_sft", TOOL_POOL_SHARES)],
        "general_tool_prompts": [t.prompt_row() for t in pool_share(tools, "general_rl", TOOL_POOL_SHARES)],
        "eval_tool": [t.prompt_row() for t in held_out_tools],
        "eval_tool_bare": [t.bare_row() for t in held_out_tools],
    }
    manifest = {}
    for name, rows in files.items():
        write_jsonl(rows, paths.file(name))
        manifest[name] = {"rows": len(rows), "md5": file_md5(paths.file(name))}
    (paths.data / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def open_files(equations: list, seed: int) -> dict[str, list[dict]]:
    """The open-ended kind's files, each from its own share of one pool of equation tasks."""
    rng = random.Random(f"open-demonstrations/{seed}")
    return {"open_demonstrations": [open_tasks.demonstration_row(t, rng) for t in pool_share(equations, "mode_fusion_sft", OPEN_POOL_SHARES)],
            "preferences": [open_tasks.preference_row(t) for t in pool_share(equations, "reward_model", OPEN_POOL_SHARES)],
            "general_open_prompts": [open_tasks.prompt_row(t) for t in pool_share(equations, "general_rl", OPEN_POOL_SHARES)],
            "distillation_open_prompts": [open_tasks.prompt_row(t) for t in pool_share(equations, "distillation", OPEN_POOL_SHARES)],
            # the judge learns from the prompts the reward model's pairs are drawn from
            "judge_sft": open_tasks.judge_rows(pool_share(equations, "reward_model", OPEN_POOL_SHARES), seed,
                                               training=True)}


def held_out_math(cfg: PipelineConfig) -> list[tasks.MathProblem]:
    """The problems of the held-out math suite (eval_math.jsonl), with their operands."""
    w = cfg.world
    return tasks.math_problems(2 * w.eval_math_per_language, w.seed + 1, "eval", levels=w.levels)


def _sft(task: dict, reply: str, thinking: bool | None) -> dict:
    return {"messages": [{"role": "user", "content": task["question"]}, {"role": "assistant", "content": reply}],
            "thinking": thinking, "language": task["language"], "id": task["id"]}


def _trace(problem: dict, thinking: bool) -> dict:
    """A worked solution (or, without thinking, the answer alone) in the target format; the
    problem's fields stay beside it for benches that alter the working (bench/cold_start_variants.py)."""
    answer = tasks.default_math_answer(problem["answer"], problem["language"])
    row = _sft(problem, assemble_response(problem["reasoning"] if thinking else "", answer), thinking)
    return {**row, "kind": "math", **{k: problem[k] for k in ("answer", "level", "op", "a", "b")}}


def _math_prompt(problem: dict, thinking: bool) -> dict:
    return {"prompt": problem["question"], "kind": "math", "answer": problem["answer"], "language": problem["language"],
            "thinking": thinking, "id": problem["id"], "difficulty": problem["level"],
            "group": f"L{problem['level']}{problem['op']}", "op": problem["op"]}


def _instruction_prompt(task: dict) -> dict:
    return {"prompt": task["question"], "kind": "instruction", "constraints": json.loads(task["constraints"]),
            "answer": task["answer"], "language": task["language"], "thinking": tasks.instruction_mode(task),
            "id": task["id"]}


def build_tokenizer(cfg: PipelineConfig) -> None:
    from posttrain.world.tokenizer import build_tokenizer as build

    build(WorldPaths(cfg.path(cfg.paths.world)).tokenizer, tool_markers=cfg.world.tool_markers)


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
    needed = [paths.file(n) for n in ROLE_FILES + EVAL_FILES] + [paths.tokenizer / "tokenizer.json"]
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
    """The embedded world's pretrained base (teacher) or student base. (A configured model of the
    user's own is located by flows.chain.base_checkpoint.)"""
    from posttrain.registry.checkpoint import foreign_digest

    paths = WorldPaths(cfg.path(cfg.paths.world))
    directory = paths.base if which == "teacher" else paths.student_base
    if not (directory / "config.json").exists():
        raise FileNotFoundError(f"base model {directory} is missing; build it with `dvc repro` "
                                f"(or `posttrain world base --which {which}`)")
    return CheckpointRef(path=str(directory), digest=foreign_digest(directory, cfg.path(cfg.paths.runs) / "manifests"))


# Each role file takes its own share of a generated pool, so stages do not train on one another's
# prompts (fractions of the pool, so a small smoke world works the same way).
# Keyed by the pipeline's stage names (posttrain.config.pipeline.STAGES).
POOL_SHARES = {"cold_start_sft": (0.0, 0.1), "reasoning_rl": (0.1, 0.55), "rejection_sampling": (0.55, 0.7),
               "mode_fusion_sft": (0.7, 0.8), "general_rl": (0.8, 0.9), "distillation": (0.9, 1.0)}
# The pool of equation tasks (posttrain.world.open_tasks) feeds the stages from mode fusion on.
# A quarter to the demonstrations: with 200 of them the fusion policy miscopied the numbers of its
# equations more often than it swapped them, a slip no preference pair teaches (world_preferences.md).
OPEN_POOL_SHARES = {"mode_fusion_sft": (0.0, 0.25), "reward_model": (0.25, 0.65), "general_rl": (0.65, 0.85),
                    "distillation": (0.85, 1.0)}


# The pool of tool tasks (posttrain.world.tool_tasks): demonstrations for the cold start and fusion
# (which keeps the skill the reasoning RL between them never trains), general RL's prompts.
TOOL_POOL_SHARES = {"cold_start_sft": (0.0, 0.4), "mode_fusion_sft": (0.4, 0.55), "general_rl": (0.55, 1.0)}


def pool_share(rows: list, stage: str, shares: dict = POOL_SHARES) -> list:
    low, high = shares[stage]
    return rows[int(low * len(rows)):int(high * len(rows))]
