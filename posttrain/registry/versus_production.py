"""A registered version evaluated against production: `posttrain evaluate` and the `evaluate` flow.

Both versions are evaluated on the same held-out items (posttrain.evaluation) and compared metric by
metric with the paired confidence interval of the gates (posttrain.evaluation.gates).  With ``auto_rollback``
(after a promotion), a production that is significantly worse than the production before it on any
paired capability, the family of tests held at the gates' alpha, is rolled back
(posttrain.registry.promotion.rollback, recorded as ``auto-rollback`` with the evidence as its reason).
"""
from __future__ import annotations

from posttrain.registry.promotion import PromotionError, current_production, get_version, previous_production, resolve_version, rollback
from posttrain.registry.model_registry import Registry


def checkpoint_ref(registry: Registry, version: str):
    """CheckpointRef of a registered version (path = its source, digest = its digest tag)."""
    from posttrain.schema import CheckpointRef

    mv = get_version(registry, version)
    return CheckpointRef(path=mv["source"], digest=mv["tags"].get("digest", ""), version=mv["version"],
                         num_parameters=int(mv["tags"]["num_parameters"]) if mv["tags"].get("num_parameters") else None)


def compare(new, old, confidence: float = 0.95) -> list[dict]:
    """Per metric of two EvalResults on the same items: values and, where per-item outcomes exist,
    the paired difference new - old with its confidence interval (posttrain.evaluation.gates.paired_interval).
    ``verdict``: "better" / "worse" when the interval excludes 0 (in the metric's good direction,
    posttrain.metrics), else "same"."""
    from posttrain.evaluation.gates import paired_interval, regression_p_value
    from posttrain.metrics import higher_is_better

    rows = []
    for metric, value in new.metrics.items():
        row = {"metric": metric, "new": value, "old": old.metrics.get(metric), "diff": None,
               "low": None, "high": None, "verdict": None}
        a, b = new.per_item.get(metric), old.per_item.get(metric)
        if a and b and len(a) == len(b):
            mean, low, high = paired_interval(a, b, confidence)
            up, down = ("worse", "better") if higher_is_better(metric) is False else ("better", "worse")
            row.update(diff=mean, low=low, high=high, verdict=up if low > 0 else down if high < 0 else "same")
            if higher_is_better(metric) is not None:
                row["p_worse"] = regression_p_value(a, b, 0.0, higher_is_better(metric))
        elif row["old"] is not None:
            row["diff"] = value - row["old"]
        rows.append(row)
    return rows


def family_wise_regressions(comparison: list[dict], alpha: float) -> list[dict]:
    """Rows significantly worse with the family-wise error of all paired capabilities held at alpha
    (Holm-Bonferroni, as the gates): with ~8 suites tested at 95% each, a version that changed
    nothing would be rolled back far more often than 5% of the time."""
    from posttrain.evaluation.gates import holm

    tested = [r for r in comparison if "p_worse" in r]
    return [r for r, worse in zip(tested, holm([r["p_worse"] for r in tested], alpha)) if worse and r["diff"] != 0]


def regression_reason(version: str, against: str, regressed: list[dict], confidence: float) -> str:
    """The history reason of an auto-rollback: each regressed capability with both values and the
    paired confidence interval of the difference."""
    parts = [f"{r['metric']} {r['new']:.3f} vs {r['old']:.3f} (diff {r['diff']:+.3f}, "
             f"{confidence:.0%} CI [{r['low']:+.3f}, {r['high']:+.3f}])" for r in regressed]
    return f"v{version} significantly worse than v{against} on " + "; ".join(parts)


def evaluate_version(registry: Registry, cfg, version: str, *, against_production: bool = True,
                     auto_rollback: bool = False, actor: str | None = None) -> dict:
    """Evaluate a registered version on the held-out suites (posttrain.evaluation.suites.evaluate) and
    compare it item by item with ``against``: the production version (when another version is
    production), or, with ``auto_rollback``, the production before it.

    ``auto_rollback`` (after a promotion): ``version`` must be production; if it is significantly
    worse than the previous production on any paired capability (:func:`compare` verdict "worse"),
    production is rolled back to that version, recorded as ``auto-rollback`` by ``actor`` (required
    then) with :func:`regression_reason`, and only if nobody moved production while the evaluation ran.

    Returns ``{"version", "metrics", "production", "against", "comparison", "regressions",
    "rollback"}`` (``comparison``: rows of :func:`compare` or None; ``regressions``: its "worse"
    rows; ``rollback``: the committed history entry or None).  Refuses a checkpoint that is
    missing or altered since registration.
    """
    from posttrain.evaluation import suites
    from posttrain.registry.checkpoint import is_intact

    if auto_rollback and not actor:
        raise ValueError("auto_rollback needs the actor its rollback is recorded under")
    version = resolve_version(registry, version)
    prod = current_production(registry)
    if auto_rollback:
        if not against_production:
            raise PromotionError("auto-rollback needs the comparison with the previous production")
        if prod != version:
            raise PromotionError(f"auto-rollback judges the production version; {version} is not production "
                                 f"({prod or 'none'} is)")
        against = previous_production(registry)
    else:
        against = prod if against_production and prod != version else None
    ref = checkpoint_ref(registry, version)
    if not is_intact(ref):
        raise PromotionError(f"checkpoint of version {version} ({ref.path}) is missing or altered since it "
                             "was registered; cannot evaluate what was registered")
    result = suites.evaluate(ref, cfg, desc=f"evaluating version {version}")
    comparison, regressed, entry = None, [], None
    if against:
        against_ref = checkpoint_ref(registry, against)
        if not is_intact(against_ref):
            raise PromotionError(f"version {against} ({against_ref.path}) to compare with is missing or altered")
        against_result = suites.evaluate(against_ref, cfg, desc=f"evaluating version {against}")
        comparison = compare(result, against_result, cfg.evaluation.confidence)
        regressed = family_wise_regressions(comparison, cfg.gates.alpha)
    if auto_rollback and regressed:
        entry = rollback(registry, to=against, auto=True, if_production=version, actor=actor,
                         reason=regression_reason(version, against, regressed, cfg.evaluation.confidence))
    return {"version": version, "metrics": result.metrics, "production": prod, "against": against,
            "comparison": comparison, "regressions": regressed, "rollback": entry}
