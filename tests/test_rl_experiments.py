"""The bookkeeping of bench/rl_experiments.py: budgets and the per-parent summary tables."""
import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("rl_experiments", Path(__file__).parents[1] / "bench" / "rl_experiments.py")
rl_experiments = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(rl_experiments)


def test_generated_tokens_counts_completions_of_every_logged_step():
    log = [{"step": 1, "completions/mean_length": 80.0}, {"step": 2, "completions/mean_length": 70.5},
           {"step": 2, "train_runtime": 9.0}]
    assert rl_experiments.generated_tokens(log, completions_per_step=64) == round((80.0 + 70.5) * 64)


def test_summary_never_averages_runs_of_different_parents():
    def run(parent, accuracy, seed):
        metrics = dict.fromkeys(rl_experiments.REPORTED, 0.0) | {"math/accuracy": accuracy}
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
        metrics = dict.fromkeys(rl_experiments.REPORTED, 0.0) | {"math/accuracy": accuracy}
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
    assert rl_experiments.stage_config_hash(config, {}, {"data.reasoning_prompts.limit": 10}) != same   # other data
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        rl_experiments.parse_assignments(["evaluation.max_new_tokens"])


def test_held_out_math_splits_by_problem_group_of_the_prepared_rows():
    from stage_data import by_group   # on the path once rl_experiments is loaded, as for the scripts

    rows = [{"prompt": [], "group": "L1+"}, {"prompt": [], "group": "L2*"}, {"prompt": [], "group": "L1+"},
            {"prompt": [], "group": "L2*"}]
    assert by_group(rows, [1.0, 0.0, 0.0, 0.0]) == {"L1+": 0.5, "L2*": 0.0}
    with pytest.raises(ValueError):
        by_group(rows, [1.0])   # scores of another suite
    assert rl_experiments.kinds_cell([{"L1+": 0.5, "L2*": 0.0}, {"L1+": 1.0, "L2*": 0.5}, None]) == "L1+ 0.75 L2* 0.25"


def test_held_out_rows_meet_their_world_problems_and_stages_get_prepared_inputs(tmp_path):
    from conftest import write_smoke_config
    from stage_data import math_rows, prepared_data, stage_inputs

    from posttrain.config.loading import load_config
    from posttrain.schema import CheckpointRef
    from posttrain.world import tasks
    from posttrain.world.build import build_data

    cfg = load_config(write_smoke_config(tmp_path))
    build_data(cfg)
    data = prepared_data(cfg, ("reasoning_rl",))
    rows = math_rows(data)
    assert rows == math_rows(cfg)   # prepared, or loaded from the sources: the same rows
    problems = rl_experiments.world_problems(cfg, rows)
    assert [p["question"] for p in problems] == [r["prompt"][-1]["content"] for r in rows]
    assert [str(tasks.compute(p["op"], p["a"], p["b"])) for p in problems] == [r["answer"] for r in rows]
    assert [f"L{p['level']}{p['op']}" for p in problems] == [r["group"] for r in rows]
    with pytest.raises(SystemExit, match="not the embedded world's problem"):
        rl_experiments.world_problems(cfg, [{**rows[0], "prompt": [{"role": "user", "content": "What is 1 + 1?"}]}])

    parent = CheckpointRef(path=str(tmp_path / "parent"), digest="d")
    inputs = stage_inputs(cfg, "reasoning_rl", data, work_dir=tmp_path / "work", parent=parent, seed=3)
    assert set(inputs.data) == {"reasoning_prompts"} and inputs.probe == data.suites["math"] and inputs.seed == 3
    assert Path(inputs.data["reasoning_prompts"].path).parent == cfg.path(cfg.paths.runs) / "prepared"
    assert stage_inputs(cfg, "reasoning_rl", data, work_dir="w", parent=parent, seed=0).model == cfg.base.settings()


def test_parent_trains_on_the_cold_start_variant(tmp_path, monkeypatch):
    import json

    from conftest import write_smoke_config

    import posttrain.world.build as build
    from posttrain.config.loading import load_config
    from posttrain.data.files import read_jsonl
    from posttrain.schema import CheckpointRef
    from posttrain.world.reflection import is_answer_only
    from stages import cold_start_sft

    config = write_smoke_config(tmp_path)
    build.build_data(load_config(config))
    trained = []

    def fake_run(stage_config, inputs):   # what the stage would train on, without training
        trained.append((stage_config, inputs))
        (Path(inputs.work_dir) / "checkpoint").mkdir(parents=True)
        (Path(inputs.work_dir) / "checkpoint" / "config.json").write_text("{}")

    monkeypatch.setattr(cold_start_sft, "run", fake_run)
    monkeypatch.setattr(build, "base_checkpoint", lambda cfg, which: CheckpointRef(path="base", digest="base-digest"))
    monkeypatch.setattr(rl_experiments, "PARENTS", tmp_path / "parents")

    parent = rl_experiments.build_parent(str(config), {"answer_only_share": 1.0, "trainer.epochs": 1}, {})
    (stage_config, inputs), = trained
    rows = read_jsonl(Path(inputs.data["cold_start"].path))
    world, episodes = [r for r in rows if r.get("kind") != "tool"], [r for r in rows if r.get("kind") == "tool"]
    assert len(world) == 16 and all(is_answer_only(r["messages"][-1]["content"]) for r in world)
    # the smoke cold start's tool episodes have no worked solution: kept as they are, and counted
    demonstrations = read_jsonl(tmp_path / "data" / "world" / "tool_demonstrations.jsonl")[:4]
    assert [r["messages"] for r in episodes] == [r["messages"] for r in demonstrations]
    assert stage_config.trainer.epochs == 1 and inputs.parent.digest == "base-digest"
    identity = json.loads((parent.parent / "identity.json").read_text())
    assert identity["variant"] == {"answer_only_share": 1.0} and identity["altered"]["answer_only"] == 16
    assert identity["altered"]["tool_episodes_unaltered"] == 4
    assert rl_experiments.build_parent(str(config), {"answer_only_share": 1.0, "trainer.epochs": 1}, {}) == parent
    assert len(trained) == 1   # built once, then reused
    plain = rl_experiments.build_parent(str(config), {"trainer.epochs": 1}, {})
    assert plain != parent and not any(is_answer_only(r["messages"][-1]["content"])
                                       for r in read_jsonl(Path(trained[1][1].data["cold_start"].path)))


def test_runs_recorded_under_old_metric_names_are_read_under_the_new_ones():
    def run(seed, metrics):
        return {"seed": seed, "parent": "p", "metrics": metrics, "wrong_length_slope": None, "generated_tokens": 1}

    old = {name: 0.0 for name in rl_experiments.OLD_NAMES} | {"math_accuracy": 0.2, "math_sampled_pass1": 0.3}
    new = dict.fromkeys(rl_experiments.REPORTED + rl_experiments.MORE, 0.0) | {"math/accuracy": 0.4,
                                                                              "math/sampled_pass1": 0.5}
    store = {"parents": {"p": old | {"math_by_kind": {"L1+": 0.5}}}, "runs": {"gain": {"default": [run(0, old), run(1, new)]}}}
    text = rl_experiments.summarise(store)
    (row,) = [line.split(" | ") for line in text.splitlines() if line.startswith("| default")]
    # One arm, two seeds: the old record's accuracy and the new one's are averaged, not shown apart.
    assert row[2].startswith("0.300 [") and "seeds)" not in row[2]
    sampled = 2 + len(rl_experiments.REPORTED) + rl_experiments.MORE.index("math/sampled_pass1")
    assert row[sampled].startswith("0.400 [")
    assert "math/accuracy 0.200" in text and "math_accuracy" not in text
    assert set(rl_experiments.OLD_NAMES.values()) >= set(rl_experiments.REPORTED + rl_experiments.MORE)


def test_summary_averages_later_metrics_only_over_the_runs_that_have_them():
    def run(seed, **more):
        metrics = dict.fromkeys(rl_experiments.REPORTED, 0.0) | more
        return {"seed": seed, "parent": "p", "metrics": metrics, "wrong_length_slope": None, "generated_tokens": 1}

    store = {"parents": {}, "runs": {"gain": {
        "old": [run(0), run(1)],
        "mixed": [run(0), run(1, **{"math/sampled_pass1": 0.25, "math/training_phrasing": 0.5}),
                  run(2, **{"math/sampled_pass1": 0.75, "math/training_phrasing": 0.5})]}}}
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in rl_experiments.summarise(store).splitlines()
            if line.startswith("| old") or line.startswith("| mixed")}
    sampled = 2 + len(rl_experiments.REPORTED) + rl_experiments.MORE.index("math/sampled_pass1")
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
