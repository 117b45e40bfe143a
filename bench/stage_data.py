"""What the bench scripts share to run stages and measure checkpoints outside the flow: a config's
data roles and evaluation suites prepared the way the flow prepares them, a stage's inputs, the
held-out math suite's rows and its scores by problem group, and thinking-mode replies within the
evaluation's token budget (for measures beyond `evaluate`'s greedy suites: sampled pass@1, pass@k,
re-phrased items)."""
from __future__ import annotations

from pathlib import Path

from posttrain.config import PipelineConfig
from posttrain.data.files import read_jsonl
from posttrain.evaluation import by_field
from posttrain.generation import Generation, generate_replies
from posttrain.data.prepared import PreparedData, load_suites, prepare
from posttrain.schema import CheckpointRef, StageInputs

# The held-out math suite the benches report on (`math/accuracy`, ...): the default config's name.
MATH_SUITE = "math"


def prepared_data(cfg: PipelineConfig, stages: tuple[str, ...]) -> PreparedData:
    """The roles these stages read and every evaluation suite, checked and written where the flow
    writes them (content-addressed, so runs of the same data share the files)."""
    return prepare(cfg, cfg.path(cfg.paths.runs) / "prepared", stages)


def stage_inputs(cfg: PipelineConfig, stage: str, data: PreparedData, *, work_dir: Path | str,
                 parent: CheckpointRef, seed: int, **more) -> StageInputs:
    return StageInputs(work_dir=str(work_dir), data=data.for_stage(stage), model=cfg.base.settings(),
                       probe=data.probe(cfg) if stage == "reasoning_rl" else None, parent=parent, seed=seed, **more)


def math_rows(source: PreparedData | PipelineConfig) -> list[dict]:
    """The held-out math suite's rows, normalised: from prepared files, or loaded from a config's
    sources (when nothing else of the config's data is needed)."""
    names = list(source.suites) if isinstance(source, PreparedData) else [s.name for s in source.data.suites()]
    if MATH_SUITE not in names:
        raise SystemExit(f"the benches report on an evaluation suite named {MATH_SUITE!r} (kind math); "
                         f"the config has {', '.join(names) or 'none'}")
    if isinstance(source, PreparedData):
        return read_jsonl(Path(source.suites[MATH_SUITE].path))
    return load_suites(source)[MATH_SUITE]


def by_group(rows: list[dict], scores: list[float]) -> dict[str, float]:
    """Per-item scores of the math suite by problem group (the world's "L2*": level-2 multiplication)."""
    return by_field(rows, scores, "group")


def thinking_replies(model, tokenizer, cfg: PipelineConfig, prompts: list[list[dict]], *, desc: str,
                     **sampling) -> list[list[Generation]]:
    """Thinking-mode replies to prompts (lists of turns): greedy, or sampled with `sampling`
    (do_sample, temperature, top_p, num_samples, seed)."""
    return generate_replies(model, tokenizer, cfg.base.settings().chat, [(p, True) for p in prompts],
                            max_new_tokens=cfg.evaluation.max_new_tokens, batch_size=cfg.evaluation.batch_size,
                            desc=desc, **sampling)
