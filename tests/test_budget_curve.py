"""The thinking-budget curve's pieces: where the budgets sit, what its gate targets decide, and
what the config refuses. (The curve measured end to end: tests/test_pipeline.py's smoke run.)"""
from __future__ import annotations

import pytest

from conftest import config_error
from posttrain.config.gates import GateTarget
from posttrain.evaluation.suites import budget_points
from posttrain.evaluation.gates import _curve, budget_curve
from posttrain.schema import EvalResult


def test_budgets_sit_at_quantiles_of_the_measured_think_length():
    lengths = list(range(1, 101))
    assert budget_points(lengths, [0.25, 0.5, 0.75]) == {"0": 0, "q25": 26, "q50": 51, "q75": 76}
    assert budget_points([], [0.5]) == {"0": 0}          # no closed think block: only the budget 0
    assert budget_points([0, 0, 0], [0.5]) == {"0": 0, "q50": 1}   # a nonzero budget stays nonzero


def _evaluation(curve: dict[str, tuple[float, list[float]]], plain: list[float]) -> EvalResult:
    metrics, items = {"math/accuracy": sum(plain) / len(plain)}, {"math/accuracy": plain}
    for label, (tokens, scores) in curve.items():
        metrics[f"math/budget_{label}/tokens"] = tokens
        metrics[f"math/budget_{label}/accuracy"] = sum(scores) / len(scores)
        items[f"math/budget_{label}/accuracy"] = scores
    return EvalResult(metrics=metrics, per_item=items)


N = 60
RISING = {"0": (0, [0.0] * N), "q25": (20, [1.0] * 10 + [0.0] * 50), "q75": (60, [1.0] * 25 + [0.0] * 35),
          "unlimited": (160, [1.0] * 30 + [0.0] * 30)}


def _check(kind: str, evaluation: EvalResult):
    return _curve(GateTarget(metric="math", curve=kind), evaluation, 0.95)


def test_a_rising_curve_passes_every_target():
    evaluation = _evaluation(RISING, [1.0] * 30 + [0.0] * 30)
    assert [p[0] for p in budget_curve(evaluation, "math")] == ["0", "q25", "q75", "unlimited"]
    for kind in ("nondecreasing", "dial", "unlimited_not_below_think"):
        check = _check(kind, evaluation)
        assert check.passed, check


def test_a_flat_curve_fails_the_dial():
    flat = {label: (tokens, [1.0] * 30 + [0.0] * 30) for label, (tokens, _) in RISING.items()}
    check = _check("dial", _evaluation(flat, [1.0] * 30 + [0.0] * 30))
    assert not check.passed and "q25 - unlimited" in check.detail


def test_a_curve_that_falls_with_more_budget_fails():
    falling = dict(RISING, q75=(60, [0.0] * N))   # q25 right on 10 items, q75 on none of them
    check = _check("nondecreasing", _evaluation(falling, [1.0] * 30 + [0.0] * 30))
    assert not check.passed and "q25 -> q75" in check.detail


def test_unlimited_below_the_plain_score_fails():
    check = _check("unlimited_not_below_think", _evaluation(RISING, [1.0] * 50 + [0.0] * 10))
    assert not check.passed


def test_no_curve_fails_with_a_reason():
    check = _check("dial", EvalResult(metrics={"math/accuracy": 0.5}, per_item={"math/accuracy": [0.5]}))
    assert not check.passed and "no thinking-budget curve" in check.detail


@pytest.mark.parametrize("text,words", [
    ("stages:\n  reasoning_rl:\n    gate:\n      targets:\n        - {metric: math, curve: dial}\n",
     "stages.reasoning_rl.gate.targets[0]: a curve target needs the thinking-budget curve"),
    ("evaluation:\n  budget_curve: {enabled: false}\nstages:\n  mode_fusion_sft:\n    gate:\n      targets:\n"
     "        - {metric: math, curve: dial}\n", "enabled False"),
    ("evaluation:\n  budget_curve: {suite: instruction}\n", "evaluation.budget_curve.suite: 'instruction' is not a math suite"),
    ("evaluation:\n  budget_curve: {from_stage: nowhere}\n", "evaluation.budget_curve.from_stage: 'nowhere' is not a stage"),
    ("evaluation:\n  budget_curve: {quantiles: [0.5, 1.5]}\n", "strictly between 0 and 1"),
    ("stages:\n  mode_fusion_sft:\n    gate:\n      targets:\n        - {metric: math, curve: dial, min: 0.1}\n",
     "exactly one of"),
])
def test_inconsistent_curve_settings_are_refused_at_load(tmp_path, text, words):
    assert words in config_error(tmp_path, text)


def test_the_curve_keys_the_evaluation_cache_of_the_stages_that_measure_it():
    from types import SimpleNamespace

    from flows import tasks
    from posttrain.config.loading import load_config

    cfg = load_config("configs/default.yaml")

    def key(label: str) -> str:
        return tasks.eval_cache_key(None, {"config": cfg, "checkpoint": SimpleNamespace(digest="sha256:c"),
                                           "suites": {}, "label": label})

    assert key("base") == key("cold_start_sft") == key("reasoning_rl")
    assert key("mode_fusion_sft") == key("distillation") != key("reasoning_rl")
