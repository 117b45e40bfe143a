"""Capability gates: a stage passes when its own targets hold AND no capability regressed against
its parent beyond noise and beyond the declared tolerance.

Noise is judged with paired tests: both checkpoints answer the same items, so the per-item
differences d_i = x_i - y_i give mean(d) and its standard error. A regression check with tolerance
`max_drop` asks whether the true difference is below -max_drop (one-sided z test, "higher is
better" metrics flipped for "lower is better" ones). A gate runs many such checks, so their
family-wise error is held at `gates.alpha` with Holm-Bonferroni: without it, ten checks at 95% each
fail a stage that changed nothing far more often than 5% of the time (bench/gate_false_alarms.py
measures it). Each verdict also states the smallest drop its check could detect with 80% power,
so a gate on a small suite does not pass silently for lack of evidence.
"""
from __future__ import annotations

import math
from statistics import NormalDist

from posttrain.config.gates import GateConfig, GateTarget, GatesConfig, RegressionCheck
from posttrain.metrics import higher_is_better
from posttrain.schema import EvalResult, GateCheck, GateVerdict

_Z = NormalDist()
DETECTION_POWER = 0.8


def paired_interval(new: list[float], old: list[float], confidence: float) -> tuple[float, float, float]:
    """(mean difference, lower, upper) of new − old over paired items."""
    mean, se = paired_mean_se(new, old)
    half = _Z.inv_cdf(0.5 + confidence / 2) * se
    return mean, mean - half, mean + half


def paired_mean_se(new: list[float], old: list[float]) -> tuple[float, float]:
    if len(new) != len(old) or not new:
        raise ValueError(f"paired comparison needs equal, non-empty item lists ({len(new)} vs {len(old)})")
    d = [a - b for a, b in zip(new, old)]
    n = len(d)
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var / n)


def regression_p_value(new: list[float], old: list[float], max_drop: float, higher_better: bool = True) -> float:
    """One-sided p-value of "no regression beyond max_drop": small when the new checkpoint is
    worse than the old by more than max_drop, item by item."""
    mean, se = paired_mean_se(new, old)
    gain = (mean if higher_better else -mean) + max_drop
    if se == 0:
        return 0.0 if gain < 0 else 1.0
    return _Z.cdf(gain / se)


def smallest_detectable_drop(new: list[float], old: list[float], max_drop: float, alpha: float) -> float:
    """The drop this check detects with 80% power at level alpha: the tolerance plus
    (z_alpha + z_power) standard errors, the standard error bounded by var(x) + var(y) (so an
    unchanged checkpoint, whose paired differences are all 0, does not claim perfect power)."""
    n = len(new)

    def var(xs: list[float]) -> float:
        m = sum(xs) / n
        return sum((x - m) ** 2 for x in xs) / max(1, n - 1)

    se = math.sqrt((var(new) + var(old)) / n)
    return max_drop + (_Z.inv_cdf(1 - alpha) + _Z.inv_cdf(DETECTION_POWER)) * se


def holm(p_values: list[float], alpha: float) -> list[bool]:
    """Holm-Bonferroni: which hypotheses are rejected, family-wise error at most alpha."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected


def _resolve(ref: str, stage: str, parent: str, evals: dict[str, EvalResult]) -> tuple[str, EvalResult]:
    name = parent if ref == "parent" else ref
    if name not in evals:
        raise KeyError(f"gate of {stage} refers to {ref!r} ({name}), which has no evaluation in this run")
    return name, evals[name]


def budget_curve(evaluation: EvalResult, suite: str) -> list[tuple[str, float]]:
    """(label, budget tokens) of the suite's thinking-budget curve, by budget, unlimited last."""
    prefix = f"{suite}/budget_"
    points = [(name[len(prefix):-len("/tokens")], value) for name, value in evaluation.metrics.items()
              if name.startswith(prefix) and name.endswith("/tokens")]
    return sorted(points, key=lambda p: (p[0] == "unlimited", p[1]))


def _curve(target: GateTarget, evaluation: EvalResult, confidence: float) -> GateCheck:
    suite, items = target.metric, evaluation.per_item
    points = budget_curve(evaluation, suite)
    name = f"{suite} thinking-budget curve: {target.curve.replace('_', ' ')}"
    if len(points) < 2 or points[-1][0] != "unlimited":
        return GateCheck(name=name, value=None, threshold=None, passed=False,
                         detail=f"no thinking-budget curve for suite {suite!r} in this evaluation")
    acc = {label: items[f"{suite}/budget_{label}/accuracy"] for label, _ in points}
    shown = ", ".join(f"{label} ({tokens:.0f}): {sum(acc[label]) / len(acc[label]):.3f}" for label, tokens in points)
    if target.curve == "nondecreasing":   # the worst step up the budget: its upper bound must reach 0
        steps = [(lo, hi, *paired_interval(acc[hi], acc[lo], confidence)) for (lo, _), (hi, _) in zip(points, points[1:])]
        lo, hi, mean, low, high = min(steps, key=lambda s: s[4])
        return GateCheck(name=name, value=high, threshold=0.0, passed=high >= 0,
                         detail=f"{shown}; worst step {lo} -> {hi}: diff {mean:+.3f} CI [{low:+.3f}, {high:+.3f}]")
    if target.curve == "dial":            # the smallest nonzero budget significantly below unlimited
        smallest = next((label for label, tokens in points if tokens > 0 and label != "unlimited"), None)
        if smallest is None:
            return GateCheck(name=name, value=None, threshold=0.0, passed=False, detail=f"{shown}; no nonzero budget")
        mean, low, high = paired_interval(acc[smallest], acc["unlimited"], confidence)
        return GateCheck(name=name, value=high, threshold=0.0, passed=high < 0,
                         detail=f"{shown}; {smallest} - unlimited: diff {mean:+.3f} CI [{low:+.3f}, {high:+.3f}]")
    plain = items.get(f"{suite}/accuracy", [])[:len(acc["unlimited"])]
    if len(plain) != len(acc["unlimited"]):
        return GateCheck(name=name, value=None, threshold=0.0, passed=False, detail=f"no {suite}/accuracy items")
    mean, low, high = paired_interval(acc["unlimited"], plain, confidence)
    return GateCheck(name=name, value=high, threshold=0.0, passed=high >= 0,
                     detail=f"{shown}; unlimited - plain {suite}: diff {mean:+.3f} CI [{low:+.3f}, {high:+.3f}]")


def _check(target: GateTarget, stage: str, parent: str, evaluation: EvalResult,
           stage_metrics: dict[str, float], evals: dict[str, EvalResult], confidence: float) -> GateCheck:
    if target.curve is not None:
        return _curve(target, evaluation, confidence)
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
        return _ratio(target.metric, target.ratio_min, target.of, stage, parent, evaluation, evals)
    ref_name, ref = _resolve(target.above or target.not_below, stage, parent, evals)
    mean, low, high = paired_interval(evaluation.per_item[target.metric], ref.per_item[target.metric], confidence)
    detail = f"{ref_name} {ref.metrics[target.metric]:.3f} -> {value:.3f}, diff {mean:+.3f} CI [{low:+.3f}, {high:+.3f}]"
    if target.above is not None:
        return GateCheck(name=f"{target.metric} significantly above {ref_name}", value=low, threshold=0.0,
                         passed=low > 0, detail=detail)
    return GateCheck(name=f"{target.metric} not significantly below {ref_name}", value=high, threshold=0.0,
                     passed=high >= 0, detail=detail)


def _ratio(metric: str, ratio_min: float, of: str, stage: str, parent: str, evaluation: EvalResult,
           evals: dict[str, EvalResult]) -> GateCheck:
    ref_name, ref = _resolve(of, stage, parent, evals)
    value, ref_value = evaluation.metrics.get(metric, 0.0), ref.metrics[metric]
    ratio = value / ref_value if ref_value else (1.0 if value >= ref_value else 0.0)
    return GateCheck(name=f"{metric} / {ref_name} >= {ratio_min}", value=ratio, threshold=ratio_min,
                     passed=ratio >= ratio_min, detail=f"{value:.3f} vs {ref_name} {ref_value:.3f}")


def _regressions(checks: list[RegressionCheck], stage: str, parent: str, evaluation: EvalResult,
                 evals: dict[str, EvalResult], alpha: float) -> list[GateCheck]:
    """The gate's regression checks against the parent, as one Holm-Bonferroni family."""
    _, ref = _resolve("parent", stage, parent, evals)
    tested = [c for c in checks if c.metric in evaluation.per_item and c.metric in ref.per_item]
    p_values = [regression_p_value(evaluation.per_item[c.metric], ref.per_item[c.metric], c.max_drop,
                                   higher_is_better(c.metric) is not False) for c in tested]
    rejected = holm(p_values, alpha)
    out = []
    for c, p, regressed in zip(tested, p_values, rejected):
        new, old = evaluation.per_item[c.metric], ref.per_item[c.metric]
        mean, se = paired_mean_se(new, old)
        level = alpha / len(tested)      # Holm's strictest step, for the interval shown
        half = _Z.inv_cdf(1 - level) * se
        detectable = smallest_detectable_drop(new, old, c.max_drop, level)
        origin = f" (carried from {c.origin})" if c.origin else ""
        out.append(GateCheck(
            name=f"{c.metric} not below {parent} by more than {c.max_drop:g}{origin}", value=mean,
            threshold=-c.max_drop, passed=not regressed,
            detail=(f"{parent} {ref.metrics[c.metric]:.3f} -> {evaluation.metrics[c.metric]:.3f}, diff {mean:+.3f}, "
                    f"one-sided {1 - level:.1%} bound {mean + half if higher_is_better(c.metric) is not False else mean - half:+.3f}, "
                    f"p {p:.3g} (Holm over {len(tested)} at alpha {alpha:g}); "
                    f"detects drops >= {detectable:.3f} (n {len(new)}, power {DETECTION_POWER:.0%})")))
    for c in checks:
        if c not in tested:
            out.append(GateCheck(name=f"{c.metric} not below {parent}", value=None, threshold=None, passed=False,
                                 detail=f"{c.metric} has no per-item values in both evaluations"))
    return out


def judge(stage: str, gate: GateConfig, evaluation: EvalResult, *, parent: str,
          evals: dict[str, EvalResult], stage_metrics: dict[str, float] | None = None,
          confidence: float = 0.95, gates: GatesConfig | None = None,
          carried: list[RegressionCheck] | None = None) -> GateVerdict:
    """`evals` maps stage names (and `base`) of this run to their evaluations; `parent` names the
    stage whose checkpoint this stage started from; `carried`: regression checks of earlier gates
    this gate inherits (posttrain.evaluation.gates.carried_checks)."""
    gates = gates or GatesConfig()
    checks = [_check(t, stage, parent, evaluation, stage_metrics or {}, evals, confidence) for t in gate.targets]
    own = gate.regression_checks(gates.max_drop)
    inherited = [c for c in carried or [] if c.metric not in {o.metric for o in own} and c.metric not in gate.opt_out]
    if gate.carry_ratio is not None:   # a student against its teacher: a ratio per capability
        checks += [_ratio(c.metric, gate.carry_ratio, "parent", stage, parent, evaluation, evals)
                   for c in inherited if higher_is_better(c.metric)]
        inherited = [c for c in inherited if not higher_is_better(c.metric)]
    checks += _regressions(own + inherited, stage, parent, evaluation, evals, gates.alpha)
    opted = [GateCheck(name=f"{m} not checked (opted out)", value=None, threshold=None, passed=True, detail=reason)
             for m, reason in gate.opt_out.items()]
    return GateVerdict(stage=stage, passed=all(c.passed for c in checks), checks=checks + opted)


def carried_checks(earlier: list[tuple[str, GateConfig]], gates: GatesConfig) -> list[RegressionCheck]:
    """Every capability an earlier stage's gate checked (targets on evaluated metrics and
    regression checks), as regression checks with the tolerance first declared for it."""
    out: dict[str, RegressionCheck] = {}
    for stage, gate in earlier:
        for check in gate.regression_checks(gates.max_drop):
            out.setdefault(check.metric, check.model_copy(update={"origin": stage}))
        for target in gate.targets:
            if "/" in target.metric and not target.metric.startswith("stage."):
                out.setdefault(target.metric, RegressionCheck(metric=target.metric, max_drop=gates.max_drop,
                                                              origin=stage))
    return list(out.values())
