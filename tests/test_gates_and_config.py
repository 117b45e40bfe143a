"""Gates (paired intervals, Holm families, carried checks, tolerances) and the config fields
that drive them."""
import pytest

from posttrain.config.pipeline import ConfigError
from posttrain.config.gates import GateConfig, GateTarget
from posttrain.config.loading import load_config
from posttrain.evaluation.gates import judge, paired_interval
from posttrain.schema import EvalResult


def _eval(values: list[float]) -> EvalResult:
    return EvalResult(metrics={"math/accuracy": sum(values) / len(values)}, per_item={"math/accuracy": values})


def test_paired_interval_is_centred_on_the_mean_difference():
    mean, low, high = paired_interval([1, 1, 0, 1], [0, 1, 0, 0], 0.95)
    assert mean == pytest.approx(0.5) and low < mean < high
    assert paired_interval([1, 0], [1, 0], 0.95) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        paired_interval([1], [1, 0], 0.95)


def test_significantly_above_needs_more_than_noise():
    parent = _eval([0.0] * 100 + [1.0] * 100)
    clearly_better = _eval([1.0] * 40 + [0.0] * 60 + [1.0] * 100)  # 40 items flipped up
    barely = _eval([1.0] * 2 + [0.0] * 98 + [1.0] * 100)             # 2 items flipped up
    gate = GateConfig(targets=[GateTarget(metric="math/accuracy", above="parent")], regression=[])
    evals = {"cold_start_sft": parent}
    assert judge("reasoning_rl", gate, clearly_better, parent="cold_start_sft", evals=evals).passed
    assert not judge("reasoning_rl", gate, barely, parent="cold_start_sft", evals=evals).passed


def test_regression_beyond_noise_fails_the_gate_and_noise_does_not():
    parent = _eval([1.0] * 150 + [0.0] * 50)
    worse = _eval([0.0] * 40 + [1.0] * 110 + [0.0] * 50)
    noisy = _eval([0.0] * 2 + [1.0] * 148 + [1.0] * 2 + [0.0] * 48)
    gate = GateConfig(targets=[], regression=["math/accuracy"])
    assert not judge("x", gate, worse, parent="p", evals={"p": parent}).passed
    assert judge("x", gate, noisy, parent="p", evals={"p": parent}).passed


def test_absolute_ratio_and_stage_metric_targets():
    teacher, student = _eval([1.0] * 10), _eval([1.0] * 7 + [0.0] * 3)
    gate = GateConfig(targets=[GateTarget(metric="math/accuracy", ratio_min=0.6, of="parent"),
                               GateTarget(metric="stage.kept_rows", min=5)], regression=[])
    verdict = judge("distillation", gate, student, parent="general_rl", evals={"general_rl": teacher},
                    stage_metrics={"kept_rows": 4})
    assert [c.passed for c in verdict.checks] == [True, False] and not verdict.passed


def test_gate_target_needs_exactly_one_kind():
    with pytest.raises(ValueError, match="exactly one"):
        GateTarget(metric="math/accuracy", min=0.1, above="parent")


def _config_with_gate(tmp_path, gate: str):
    path = tmp_path / "gated.yaml"
    path.write_text("data:\n  eval:\n    - {name: math, kind: math, sources: {path: m.jsonl}}\n"
                    f"stages:\n  general_rl:\n    gate: {gate}\n")
    return path


def test_gates_may_only_name_metrics_the_suites_produce_and_stages_that_ran_before(tmp_path):
    load_config(_config_with_gate(tmp_path, "{targets: [{metric: math/accuracy, above: reasoning_rl}], "
                                            "regression: [math/format, math/accuracy_en]}"))
    for gate, message in [
            ("{targets: [{metric: math/acc, min: 0.1}]}", r"general_rl.gate.targets\[0\]: unknown metric 'math/acc'"),
            ("{regression: [instruction/accuracy]}", r"unknown metric 'instruction/accuracy'"),
            ("{targets: [{metric: math/accuracy, above: distillation}]}", r"'distillation' is not a stage before"),
            ("{targets: [{metric: math/accuracy, above: reasoning}]}", r"'reasoning' is not a stage before"),
            ("{regression: [math/len_wrong]}", r"descriptive and cannot be gated")]:
        with pytest.raises(ConfigError, match=message):
            load_config(_config_with_gate(tmp_path, gate))


def test_config_errors_name_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("stages:\n  reasoning_rl:\n    trainer:\n      loss_type: ppo\n      lerning_rate: 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    message = str(err.value)
    assert "stages.reasoning_rl.trainer.loss_type" in message and "ppo" in message
    assert "stages.reasoning_rl.trainer.lerning_rate" in message


def test_yaml_syntax_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("seed: 1\nworld:\n  seed: [1,\n")
    with pytest.raises(ConfigError, match=r"broken.yaml:\d+"):
        load_config(bad)


def test_shipped_configs_validate():
    from conftest import ROOT

    for name in ("default.yaml", "smoke.yaml"):
        cfg = load_config(ROOT / "configs" / name)
        assert cfg.stages.reasoning_rl.trainer.loss_type in ("grpo", "dr_grpo", "dapo", "bnpo")


def test_cli_run_rejects_a_bad_config_before_starting_anything(tmp_path, capsys):
    from posttrain.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("stages:\n  cold_start_sft:\n    trainer: {batch_size: -3}\n")
    assert main(["run", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "stages.cold_start_sft.trainer.batch_size" in err and "bad.yaml" in err
    assert main(["run", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_declared_tolerance_fails_only_when_the_whole_interval_is_below_minus_max_drop():
    from posttrain.config.gates import RegressionCheck

    parent = _eval([1.0] * 600 + [0.0] * 400)
    slightly_worse = _eval([0.0] * 10 + [1.0] * 590 + [0.0] * 400)     # -0.01: significant, within 0.02
    much_worse = _eval([0.0] * 60 + [1.0] * 540 + [0.0] * 400)         # -0.06: beyond 0.02
    strict = GateConfig(regression=["math/accuracy"])
    tolerant = GateConfig(regression=[RegressionCheck(metric="math/accuracy", max_drop=0.02)])
    assert not judge("x", strict, slightly_worse, parent="p", evals={"p": parent}).passed
    assert judge("x", tolerant, slightly_worse, parent="p", evals={"p": parent}).passed
    verdict = judge("x", tolerant, much_worse, parent="p", evals={"p": parent})
    assert not verdict.passed and "by more than 0.02" in verdict.checks[0].name
    assert "detects drops >=" in verdict.checks[0].detail


def test_holm_keeps_the_family_wise_error_and_still_rejects_a_clear_effect():
    from posttrain.evaluation.gates import holm

    assert holm([0.03, 0.04, 0.5], alpha=0.05) == [False, False, False]   # each alone would fail at 5%
    assert holm([0.001, 0.02, 0.5], alpha=0.05) == [True, True, False]     # 0.001 <= .05/3, 0.02 <= .05/2
    assert holm([], alpha=0.05) == []


def test_a_small_suite_says_how_large_a_drop_it_could_have_missed():
    from posttrain.evaluation.gates import smallest_detectable_drop

    small, large = [1.0, 0.0] * 15, [1.0, 0.0] * 500
    assert smallest_detectable_drop(small, small, 0.0, 0.05) > 0.3    # 30 items: a 30-point drop can hide
    assert smallest_detectable_drop(large, large, 0.0, 0.05) < 0.1


def test_later_gates_carry_every_checked_capability_unless_opted_out_with_a_reason():
    from posttrain.evaluation.gates import carried_checks
    from posttrain.schema import EvalResult

    earlier = [("mode_fusion_sft", GateConfig(targets=[GateTarget(metric="no_think/mode_compliance", min=0.9)])),
               ("general_rl", GateConfig(regression=["math/accuracy"]))]
    carried = carried_checks(earlier, __import__("posttrain.config.gates", fromlist=["GatesConfig"]).GatesConfig())
    assert {(c.metric, c.origin) for c in carried} == {("no_think/mode_compliance", "mode_fusion_sft"),
                                                       ("math/accuracy", "general_rl")}
    teacher = EvalResult(metrics={"no_think/mode_compliance": 0.98, "math/accuracy": 0.5},
                         per_item={"no_think/mode_compliance": [1.0] * 49 + [0.0], "math/accuracy": [1.0, 0.0] * 25})
    student = EvalResult(metrics={"no_think/mode_compliance": 0.2, "math/accuracy": 0.5},
                         per_item={"no_think/mode_compliance": [1.0] * 10 + [0.0] * 40, "math/accuracy": [1.0, 0.0] * 25})
    plain = judge("distillation", GateConfig(), student, parent="general_rl", evals={"general_rl": teacher})
    assert plain.passed   # what the old gate did: nothing checked the lost /no_think switch
    carried_gate = judge("distillation", GateConfig(carry_ratio=0.8), student, parent="general_rl",
                         evals={"general_rl": teacher}, carried=carried)
    assert not carried_gate.passed
    assert [c.passed for c in carried_gate.checks if "mode_compliance" in c.name] == [False]
    opted = judge("distillation", GateConfig(carry_ratio=0.8, opt_out={"no_think/mode_compliance": "not needed"}),
                  student, parent="general_rl", evals={"general_rl": teacher}, carried=carried)
    assert opted.passed and any(c.detail == "not needed" for c in opted.checks)
    with pytest.raises(ValueError, match="needs a reason"):
        GateConfig(opt_out={"math/accuracy": " "})


def test_served_configs_must_lie_in_the_allowed_folders_symlinks_followed(tmp_path, monkeypatch):
    from posttrain.config.loading import served_config_path

    configs, outside = tmp_path / "configs", tmp_path / "outside.yaml"
    configs.mkdir()
    (configs / "ok.yaml").write_text("seed: 1\n")
    outside.write_text("seed: 2\n")
    (configs / "link.yaml").symlink_to(outside)
    assert served_config_path("configs/ok.yaml", tmp_path) == configs / "ok.yaml"   # no restriction set
    monkeypatch.setenv("POSTTRAIN_CONFIG_DIRS", str(configs))
    assert served_config_path("configs/ok.yaml", tmp_path) == configs / "ok.yaml"
    for bad in (str(outside), "configs/../outside.yaml", "configs/link.yaml"):
        with pytest.raises(ConfigError, match="outside the folders"):
            served_config_path(bad, tmp_path)


@pytest.mark.parametrize("yaml_text,field", [
    ("seed: -1", "seed"), ("seed: 8589934592", "seed"),
    ("stages: {general_rl: {rewards: {correctness: 0, format: 0}}}", "rewards"),
    ("stages: {reasoning_rl: {rewards: {format: -0.2}}}", "rewards.format"),
    ("base: {teacher_architecture: {hidden_size: 250, num_attention_heads: 4}}", "teacher_architecture"),
    ("base: {pretrain: {steps: 0}}", "pretrain.steps"),
    ("world: {corpus: {word_share: 1.5}}", "corpus.word_share"),
    ("stages: {distillation: {gate: {targets: [{metric: stage.kept_rows, ratio_min: 0, of: parent}]}}}", "ratio_min"),
])
def test_numbers_out_of_their_range_are_refused_naming_the_field(tmp_path, yaml_text, field):
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text + "\n")
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(path)
