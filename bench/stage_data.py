"""What the bench scripts share to run stages and measure checkpoints outside the flow: a config's
data roles and evaluation suites prepared the way the flow prepares them, a stage's inputs, the
held-out math suite's rows and its scores by problem group, and thinking-mode replies within the
evaluation's token budget (for measures beyond `evaluate`'s greedy suites: sampled pass@1, pass@k,
re-phrased items)."""
from __future__ import annotations

from pathlib import Path

from posttrain.config.pipeline import PipelineConfig
from posttrain.data.files import read_jsonl
from posttrain.evaluation.suites import by_field
from posttrain.generation.engines import Generation, generate_replies
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


T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def mean_ci(values: list[float]) -> tuple[float, float, float]:
    """Mean over seeds with its 95% t-interval (nan bounds for one seed)."""
    import statistics

    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, float("nan"), float("nan")
    half = T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / len(values) ** 0.5
    return mean, mean - half, mean + half


def paired_against(per_seed: dict, arm: str, baseline: str, metrics, confidence: float) -> dict:
    """Per metric: the arm's item-level scores against the baseline arm's, pooled over seeds (paired interval)."""
    from posttrain.evaluation.gates import paired_interval

    out = {}
    for metric in metrics:
        new = [v for s in per_seed for v in per_seed[s][arm]["per_item"].get(metric, [])]
        old = [v for s in per_seed for v in per_seed[s][baseline]["per_item"].get(metric, [])]
        if new and len(new) == len(old):
            out[metric] = paired_interval(new, old, confidence)
    return out


def arms_plot(arms: dict[str, dict], metrics, path: Path, *, title: str,
              ylabel: str = "score (mean over seeds, 95% CI)") -> None:
    """Grouped bars: per metric, each arm's (mean, low, high) with its interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(arms)
    for i, (arm, r) in enumerate(arms.items()):
        ax.bar([x + (i - (len(arms) - 1) / 2) * width for x in range(len(metrics))], [r[m][0] for m in metrics], width,
               yerr=[[r[m][0] - r[m][1] for m in metrics], [r[m][2] - r[m][0] for m in metrics]], capsize=3, label=arm)
    ax.set_xticks(range(len(metrics)), [m.replace("/", "\n") for m in metrics])
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
