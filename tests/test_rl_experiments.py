"""The bookkeeping of bench/rl_experiments.py: budgets and the per-parent summary tables."""
import importlib.util
from pathlib import Path

import pytest

from posttrain.evaluation import math_by_kind

SPEC = importlib.util.spec_from_file_location("rl_experiments", Path(__file__).parents[1] / "bench" / "rl_experiments.py")
rl_experiments = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(rl_experiments)


def test_generated_tokens_counts_completions_of_every_logged_step():
    log = [{"step": 1, "completions/mean_length": 80.0}, {"step": 2, "completions/mean_length": 70.5},
           {"step": 2, "train_runtime": 9.0}]
    assert rl_experiments.generated_tokens(log, completions_per_step=64) == round((80.0 + 70.5) * 64)


def test_summary_never_averages_runs_of_different_parents():
    def run(parent, accuracy, seed):
        metrics = dict.fromkeys(rl_experiments.REPORTED, 0.0) | {"math_accuracy": accuracy}
        return {"seed": seed, "parent": parent, "metrics": metrics, "wrong_length_slope": None, "generated_tokens": 100}

    store = {"parents": {}, "runs": {"gain": {"default": [run("old", 0.2, 0), run("old", 0.2, 1),
                                                          run("new", 0.8, 0), run("new", 0.8, 1)]}}}
    text = rl_experiments.summarise(store)
    assert "## gain (parent `old`)" in text and "## gain (parent `new`)" in text
    assert "| default | 2 | 0.200" in text and "| default | 2 | 0.800" in text
    assert "0.500" not in text


def test_t_interval_widens_with_spread():
    mean, low, high = rl_experiments.t_interval([0.5, 0.6, 0.7])
    assert mean == pytest.approx(0.6) and low < 0.5 and high > 0.7
    assert rl_experiments.t_interval([0.6, 0.6, 0.6])[1:] == pytest.approx((0.6, 0.6))


def test_summary_never_averages_runs_of_different_budgets():
    def run(extra, accuracy, seed):
        metrics = dict.fromkeys(rl_experiments.REPORTED, 0.0) | {"math_accuracy": accuracy}
        return {"seed": seed, "parent": "p", "extra": extra, "metrics": metrics, "wrong_length_slope": None,
                "generated_tokens": 100}

    long = {"stages.reasoning_rl.trainer.max_steps": 240}
    store = {"parents": {}, "runs": {"gain": {"default": [run({}, 0.2, 0), run({}, 0.2, 1),
                                                          run(long, 0.8, 0), run(long, 0.8, 1)]}}}
    text = rl_experiments.summarise(store)
    assert "## gain (parent `p`)" in text and '"stages.reasoning_rl.trainer.max_steps": 240' in text
    assert "| default | 2 | 0.200" in text and "| default | 2 | 0.800" in text and "0.500" not in text


def test_arm_overrides_land_in_the_stage_and_set_takes_full_paths():
    config = str(Path(__file__).parents[1] / "configs" / "default.yaml")
    cfg = rl_experiments.arm_config(config, {"trainer.loss_type": "grpo"},
                                    {"evaluation.max_new_tokens": 256, "stages.reasoning_rl.trainer.max_steps": 7})
    stage = cfg.stage("reasoning_rl")
    assert (stage.trainer.loss_type, stage.trainer.max_steps, cfg.evaluation.max_new_tokens) == ("grpo", 7, 256)
    same = rl_experiments.stage_config_hash(config, {}, {})
    assert rl_experiments.stage_config_hash(config, {}, {"evaluation.max_new_tokens": 256}) != same
    assert rl_experiments.stage_config_hash(config, {"trainer.loss_type": "dapo"}, {}) == same   # the default
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        rl_experiments.parse_assignments(["evaluation.max_new_tokens"])


def test_math_by_kind_splits_held_out_math_by_level_and_operation(tmp_path):
    import json

    rows = [{"level": 1, "op": "+"}, {"level": 2, "op": "*"}, {"level": 1, "op": "+"}, {"level": 2, "op": "*"}]
    (tmp_path / "world").mkdir()
    (tmp_path / "world" / "eval_math.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert math_by_kind(tmp_path, [1.0, 0.0, 0.0, 0.0]) == {"L1+": 0.5, "L2*": 0.0}
    with pytest.raises(ValueError):
        math_by_kind(tmp_path, [1.0])   # scores of another suite
    assert rl_experiments.kinds_cell([{"L1+": 0.5, "L2*": 0.0}, {"L1+": 1.0, "L2*": 0.5}, None]) == "L1+ 0.75 L2* 0.25"


def test_summary_averages_later_metrics_only_over_the_runs_that_have_them():
    def run(seed, **more):
        metrics = dict.fromkeys(rl_experiments.REPORTED, 0.0) | more
        return {"seed": seed, "parent": "p", "metrics": metrics, "wrong_length_slope": None, "generated_tokens": 1}

    store = {"parents": {}, "runs": {"gain": {
        "old": [run(0), run(1)],
        "mixed": [run(0), run(1, math_sampled_pass1=0.25, math_training_phrasing=0.5),
                  run(2, math_sampled_pass1=0.75, math_training_phrasing=0.5)]}}}
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in rl_experiments.summarise(store).splitlines()
            if line.startswith("| old") or line.startswith("| mixed")}
    sampled = 2 + len(rl_experiments.REPORTED) + rl_experiments.MORE.index("math_sampled_pass1")
    assert rows["old"][sampled] == "–"
    assert rows["mixed"][sampled].startswith("0.500 [") and rows["mixed"][sampled].endswith("(2 seeds)")


def test_assignments_read_exponent_numbers_as_numbers():
    pairs = rl_experiments.parse_assignments(["lr=1e-4", "beta=0.04", "steps=30", "loss=dr_grpo", "name=1e"])
    assert pairs == {"lr": 1e-4, "beta": 0.04, "steps": 30, "loss": "dr_grpo", "name": "1e"}
    assert pairs == rl_experiments.parse_assignments(["lr=0.0001", "beta=4e-2", "steps=30", "loss=dr_grpo", "name=1e"])


def test_training_curve_keeps_steps_with_length_and_correctness():
    log = [{"step": 1, "completions/mean_length": 50.0, "rewards/correctness/mean": 0.25},
           {"step": 1, "heldout/math_accuracy": 0.3},
           {"step": 2, "completions/mean_length": 70.0, "rewards/correctness/mean": 0.5},
           {"step": 2, "train_runtime": 9.0}]
    assert rl_experiments.training_curve(log) == [[1, 50.0, 0.25], [2, 70.0, 0.5]]


def test_curves_are_plotted_only_when_runs_have_them(tmp_path):
    run = {"training_curve": [[1, 50.0, 0.2], [2, 60.0, 0.3], [3, 70.0, 0.4]], "heldout_curve": [[0, 0.2], [3, 0.3]]}
    assert rl_experiments.plot_curves({"default": [{"heldout_curve": [[0, 0.2]]}]}, "t", tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
    other = {"training_curve": [[1, 30.0, 0.9], [2, 30.0, 0.9]]}
    figure = rl_experiments.plot_curves({"default": [run, run], "other": [other]}, "t", tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG")
    length, correctness, probe = figure.axes
    assert len(length.lines) == 3 and len(probe.lines) == 2   # a line per seed; "other" has no probe
    assert list(length.lines[0].get_ydata()) == [50.0, 55.0, 60.0]   # running mean over up to 10 steps
    assert list(correctness.lines[2].get_ydata()) == [0.9, 0.9]


PASS_SPEC = importlib.util.spec_from_file_location("pass_at_k", Path(__file__).parents[1] / "bench" / "pass_at_k.py")
pass_at_k = importlib.util.module_from_spec(PASS_SPEC)
PASS_SPEC.loader.exec_module(pass_at_k)


def test_pass_at_k_is_the_unbiased_estimator():
    from itertools import combinations

    # By enumeration: the share of k-subsets of n samples (c of them right) holding a right one.
    for n, c, k in [(4, 1, 2), (8, 3, 4), (16, 2, 8), (16, 0, 16), (16, 15, 2)]:
        right = set(range(c))
        subsets = list(combinations(range(n), k))
        assert pass_at_k.pass_at_k(n, c, k) == pytest.approx(sum(bool(right & set(s)) for s in subsets) / len(subsets))
    assert pass_at_k.pass_at_k(16, 4, 1) == pytest.approx(4 / 16)
    assert pass_at_k.ks_up_to(16) == [1, 2, 4, 8, 16] and pass_at_k.ks_up_to(12) == [1, 2, 4, 8]
