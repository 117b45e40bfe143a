"""Capability gates: a stage passes when its own targets hold AND no capability regressed against
its parent beyond noise.

Noise is judged with a paired confidence interval: both checkpoints answer the same items, so the
per-item differences d_i = x_i - y_i give mean(d) ± z·sd(d)/√n. "Significantly above" means the
whole interval is above zero; "regressed" means it is wholly below zero.
"""
from __future__ import annotations

import math
from statistics import NormalDist

from posttrain.config import GateConfig, GateTarget
from posttrain.schema import EvalResult, GateCheck, GateVerdict


def paired_interval(new: list[float], old: list[float], confidence: float) -> tuple[float, float, float]:
    """(mean difference, lower, upper) of new − old over paired items."""
    if len(new) != len(old) or not new:
        raise ValueError(f"paired comparison needs equal, non-empty item lists ({len(new)} vs {len(old)})")
    d = [a - b for a, b in zip(new, old)]
    n = len(d)
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / (n - 1) if n > 1 else 0.0
    half = NormalDist().inv_cdf(0.5 + confidence / 2) * math.sqrt(var / n)
    return mean, mean - half, mean + half


def _resolve(ref: str, stage: str, parent: str, evals: dict[str, EvalResult]) -> tuple[str, EvalResult]:
    name = parent if ref == "parent" else ref
    if name not in evals:
        raise KeyError(f"gate of {stage} refers to {ref!r} ({name}), which has no evaluation in this run")
    return name, evals[name]


def _check(target: GateTarget, stage: str, parent: str, evaluation: EvalResult,
           stage_metrics: dict[str, float], evals: dict[str, EvalResult], confidence: float) -> GateCheck:
    if target.metric.startswith("stage."):
        key = target.metric.removeprefix("stage.")
        value = stage_metrics.get(key)
        if value is None:
            return GateCheck(name=target.metric, value=None, threshold=target.min, passed=False,
                             detail=f"stage reported no metric {key!r}")
    else:
        value = evaluation.metrics.get(target.metric)
    if target.min is not None:
        return GateCheck(name=f"{target.metric} >= {target.min}", value=value, threshold=target.min,
                         passed=value is not None and value >= target.min)
    if target.max is not None:
        return GateCheck(name=f"{target.metric} <= {target.max}", value=value, threshold=target.max,
                         passed=value is not None and value <= target.max)
    if target.ratio_min is not None:
        ref_name, ref = _resolve(target.of, stage, parent, evals)
        ref_value = ref.metrics[target.metric]
        ratio = value / ref_value if ref_value else 0.0
        return GateCheck(name=f"{target.metric} / {ref_name} >= {target.ratio_min}", value=ratio,
                         threshold=target.ratio_min, passed=ratio >= target.ratio_min,
                         detail=f"{value:.3f} vs {ref_name} {ref_value:.3f}")
    ref_name, ref = _resolve(target.above or target.not_below, stage, parent, evals)
    mean, low, high = paired_interval(evaluation.per_item[target.metric], ref.per_item[target.metric], confidence)
    detail = f"{ref_name} {ref.metrics[target.metric]:.3f} -> {value:.3f}, diff {mean:+.3f} CI [{low:+.3f}, {high:+.3f}]"
    if target.above is not None:
        return GateCheck(name=f"{target.metric} significantly above {ref_name}", value=low, threshold=0.0,
                         passed=low > 0, detail=detail)
    return GateCheck(name=f"{target.metric} not significantly below {ref_name}", value=high, threshold=0.0,
                     passed=high >= 0, detail=detail)


def judge(stage: str, gate: GateConfig, evaluation: EvalResult, *, parent: str,
          evals: dict[str, EvalResult], stage_metrics: dict[str, float] | None = None,
          confidence: float = 0.95) -> GateVerdict:
    """`evals` maps stage names (and `base`) of this run to their evaluations; `parent` names the
    stage whose checkpoint this stage started from."""
    checks = [_check(t, stage, parent, evaluation, stage_metrics or {}, evals, confidence) for t in gate.targets]
    for metric in gate.regression:
        checks.append(_check(GateTarget(metric=metric, not_below="parent"), stage, parent, evaluation,
                             stage_metrics or {}, evals, confidence))
    return GateVerdict(stage=stage, passed=all(c.passed for c in checks), checks=checks)
