"""Config loading refuses, with one short line or with errors naming field and file:line, what would
otherwise start a wrong run or end in a traceback: empty or non-mapping files, non-finite or
out-of-range numbers, duplicate keys, bytes that are not UTF-8, deep nesting, alias bombs,
directories."""
import os
import subprocess
import sys
import types

import pytest
from pydantic import ValidationError

from conftest import ROOT
from posttrain.config.pipeline import ConfigError
from posttrain.config.trainers import GRPOTrainerConfig, SFTTrainerConfig
from posttrain.config.loading import load_config
from posttrain.config.yamlconfig import MAX_DEPTH, MAX_ECHO


def _write(tmp_path, content: str | bytes, name: str = "c.yaml"):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def _error(path, **kwargs) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(path, **kwargs)
    return str(err.value)


def _one_short_line(message: str) -> None:
    assert "\n" not in message and len(message) < 400 and "Traceback" not in message, message


def _alias_bomb() -> str:
    """~340 bytes that expand to 9**9 strings."""
    lines, previous = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'], "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text", ["", "# only a comment\n\n# and another\n", "null\n", "~\n", "---\n", "{}\n"])
def test_an_empty_config_is_refused_not_read_as_the_default_pipeline(tmp_path, text):
    message = _error(_write(tmp_path, text))
    assert "c.yaml is empty" in message
    _one_short_line(message)


@pytest.mark.parametrize("text", ["- name: x\n", "just words\n", "42\n"])
def test_a_config_that_is_not_a_mapping_is_refused(tmp_path, text):
    message = _error(_write(tmp_path, text))
    assert "must be a mapping" in message
    _one_short_line(message)


@pytest.mark.parametrize("text, line, field", [
    ("stages:\n  cold_start_sft:\n    trainer:\n      learning_rate: .inf\n", 4, "stages.cold_start_sft.trainer.learning_rate"),
    ("stages:\n  reasoning_rl:\n    trainer:\n      epsilon_high: .nan\n", 4, "stages.reasoning_rl.trainer.epsilon_high"),
    ("stages:\n  general_rl:\n    rewards: {correctness: -.inf}\n", 3, "stages.general_rl.rewards.correctness"),
    ("seed: 1\nstages:\n  rejection_sampling:\n    gate:\n      targets:\n        - {metric: stage.kept_rows, min: 1.0e999}\n",
     6, "stages.rejection_sampling.gate.targets.0.min"),
    # models defined outside posttrain.config (embedded world and tiny models) are checked too
    ("base:\n  pretrain:\n    learning_rate: .inf\n", 3, "base.pretrain.learning_rate"),
    ("world:\n  corpus:\n    word_share: .NaN\n", 3, "world.corpus.word_share"),
])
def test_every_number_is_finite(tmp_path, text, line, field):
    message = _error(_write(tmp_path, text))
    assert f"c.yaml:{line}: {field}: " in message and "finite" in message, message


def test_finite_numbers_also_when_models_are_built_in_code():
    with pytest.raises(ValidationError, match="finite"):
        GRPOTrainerConfig(epsilon_high=float("nan"))   # a `float | None` field
    with pytest.raises(ValidationError, match="finite"):
        SFTTrainerConfig(learning_rate=float("inf"))


@pytest.mark.parametrize("setting, line, field", [
    ("stages: {cold_start_sft: {trainer: {max_steps: -7}}}", 1, "stages.cold_start_sft.trainer.max_steps"),
    ("stages: {cold_start_sft: {trainer: {max_steps: 0}}}", 1, "stages.cold_start_sft.trainer.max_steps"),
    ("stages:\n  mode_fusion_sft:\n    trainer: {weight_decay: -0.1}", 3, "stages.mode_fusion_sft.trainer.weight_decay"),
    ("stages:\n  general_rl:\n    trainer: {epsilon: 1.5}", 3, "stages.general_rl.trainer.epsilon"),
    ("stages:\n  general_rl:\n    trainer: {epsilon_high: 0}", 3, "stages.general_rl.trainer.epsilon_high"),
    ("paths:\n  runs: ''", 2, "paths.runs"),
    ("world:\n  seed: -1", 2, "world.seed"),
    ("world:\n  levels: []", 2, "world.levels"),
    ("world:\n  levels: [1, 4]", 2, "world.levels.1"),
])
def test_numbers_and_paths_out_of_range_are_refused(tmp_path, setting, line, field):
    message = _error(_write(tmp_path, f"name: t\n{setting}\n"))
    assert f"c.yaml:{line + 1}: {field}: " in message, message


def test_in_range_values_still_load(tmp_path):
    cfg = load_config(_write(tmp_path, "stages:\n  cold_start_sft:\n    trainer: {max_steps: -1, weight_decay: 0.1}\n"
                                       "  reasoning_rl:\n    trainer: {epsilon_high: null}\n"))
    assert cfg.stages.cold_start_sft.trainer.max_steps == -1
    assert cfg.stages.reasoning_rl.trainer.epsilon_high is None


def test_world_levels_accepted_are_the_levels_the_world_defines(tmp_path):
    from posttrain.world.tasks import LEVELS

    cfg = load_config(_write(tmp_path, f"world: {{levels: {sorted(LEVELS)}}}\n"))
    assert cfg.world.levels == sorted(LEVELS)
    assert "world.levels.0" in _error(_write(tmp_path, f"world: {{levels: [{max(LEVELS) + 1}]}}\n", "more.yaml"))


@pytest.mark.parametrize("text, key, first, second", [
    ("seed: 1\nname: x\nseed: 2\n", "'seed'", 1, 3),
    ("stages:\n  cold_start_sft:\n    trainer:\n      batch_size: 4\n      epochs: 1\n      batch_size: 8\n",
     "'batch_size'", 4, 6),
    ("name: x\nstages: {general_rl: {trainer: {max_steps: 1}},\n  general_rl: {}}\n", "'general_rl'", 2, 3),
])
def test_duplicate_keys_are_refused_naming_both_lines(tmp_path, text, key, first, second):
    message = _error(_write(tmp_path, text))
    assert f"c.yaml:{second}: duplicate key {key} (first at line {first})" in message
    _one_short_line(message)


def test_anchors_and_merge_keys_still_work(tmp_path):
    cfg = load_config(_write(tmp_path, "stages:\n  cold_start_sft:\n    trainer: &sft {learning_rate: 0.001, batch_size: 8}\n"
                                       "  mode_fusion_sft:\n    trainer:\n      <<: *sft\n      batch_size: 4\n"))
    fusion = cfg.stages.mode_fusion_sft.trainer
    assert (fusion.learning_rate, fusion.batch_size) == (0.001, 4)
    assert cfg.stages.cold_start_sft.trainer.batch_size == 8


def test_a_file_that_is_not_utf8_names_line_and_offset(tmp_path):
    message = _error(_write(tmp_path, b"name: ok\nseed: 1\n# caf\xe9\n"))
    assert "c.yaml:3 is not UTF-8" in message and "offset 22" in message
    _one_short_line(message)
    assert load_config(_write(tmp_path, "\ufeffname: bom\n".encode(), "bom.yaml")).name == "bom"


def test_a_control_character_names_its_line(tmp_path):
    message = _error(_write(tmp_path, "name: ok\nseed: 1\x00\n"))
    assert "c.yaml:2 is not valid YAML" in message
    _one_short_line(message)


@pytest.mark.parametrize("text", [
    "name: " + "[" * 20000 + "]" * 20000 + "\n",
    "".join(f"{'  ' * i}k{i}:\n" for i in range(MAX_DEPTH + 20)) + "  " * (MAX_DEPTH + 20) + "v\n",
    # each anchor one level deeper than the last: shallow as written, deep once expanded
    "".join(f"a{i}: &a{i} [{'*a' + str(i - 1) if i else 1}]\n" for i in range(MAX_DEPTH + 20)),
])
def test_deep_nesting_is_one_line_not_a_recursion_error(tmp_path, text):
    message = _error(_write(tmp_path, text))
    assert "deeper than" in message
    _one_short_line(message)


def test_an_alias_bomb_is_one_short_line(tmp_path):
    message = _error(_write(tmp_path, _alias_bomb()))
    assert "c.yaml:" in message and "alias" in message
    _one_short_line(message)


def test_an_alias_into_itself_is_refused(tmp_path):
    message = _error(_write(tmp_path, "name: x\nbase: &b {chat: *b}\n"))
    assert "c.yaml:2" in message and "contains it" in message
    _one_short_line(message)


def test_a_number_python_cannot_read_is_one_line(tmp_path):
    message = _error(_write(tmp_path, "name: x\nseed: " + "9" * 5000 + "\n"))
    assert "c.yaml:2: cannot read the value" in message
    _one_short_line(message)


def test_a_directory_says_it_is_a_directory(tmp_path):
    message = _error(tmp_path)
    assert "is a directory" in message and "does not exist" not in message


def test_echoed_values_and_error_lists_are_capped(tmp_path):
    message = _error(_write(tmp_path, "name: [" + ", ".join(["'" + "x" * 100 + "'"] * 2000) + "]\n"))
    assert "c.yaml:1: name: " in message and len(message) < 2 * MAX_ECHO + 200
    many = "data:\n  eval:\n" + "".join(f"    - {{name: s{i}, kind: nope, sources: []}}\n" for i in range(60))
    message = _error(_write(tmp_path, many, "many.yaml"))
    assert "many.yaml:3: data.eval.0.kind" in message and "more" in message and message.count("\n") < 30


def test_validation_errors_name_field_and_line_also_of_a_missing_field(tmp_path):
    text = ("name: t\n"
            "data:\n"
            "  cold_start:\n"
            "    - {path: a.jsonl}\n"
            "    - {path: b.jsonl, limit: 0}\n"
            "  eval:\n"
            "    - name: math\n"
            "      kind: math\n")
    message = _error(_write(tmp_path, text))
    assert "c.yaml:5: data.cold_start.1.limit: " in message
    assert "c.yaml:7: data.eval.0.sources: Field required" in message   # the line of its parent mapping


def test_overrides_are_named_as_overrides_and_cannot_crash(tmp_path):
    path = _write(tmp_path, "name: t\nstages: {reasoning_rl: {trainer: {max_steps: 5}}}\n")
    message = _error(path, overrides={"stages.reasoning_rl.trainer.max_steps": 0})
    assert "c.yaml (override): stages.reasoning_rl.trainer.max_steps" in message
    message = _error(path, overrides={"name.deeper": 1})
    assert "override name.deeper" in message


@pytest.mark.parametrize("text", [_alias_bomb(), "name: " + "[" * 20000 + "]" * 20000 + "\n"],
                         ids=["alias_bomb", "deep_nesting"])
def test_cli_run_exits_2_with_one_line(tmp_path, text):
    path = _write(tmp_path, text)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "posttrain.cli", "run", "--config", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith("error: config ") and done.stdout == ""
    _one_short_line(done.stderr.strip())


@pytest.mark.parametrize("content", ["", b"name: x\n\xff\n", "a: 1\na: 2\n", "- 1\n"])
def test_cli_run_exits_2_with_one_line_in_process(tmp_path, capsys, monkeypatch, content):
    from posttrain.cli import main

    def started(**kwargs):
        raise AssertionError("the pipeline started on a config that should have been refused")

    monkeypatch.setitem(sys.modules, "flows.pipeline", types.SimpleNamespace(pipeline=started))
    assert main(["run", "--config", str(_write(tmp_path, content))]) == 2
    _one_short_line(capsys.readouterr().err.strip())
    assert main(["run", "--config", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_a_config_extends_another_and_errors_name_the_layer_that_sets_the_field(tmp_path):
    """`extends:` layers a config on another (mappings merged key by key, the rest replaced); an
    error names the file and line of the layer that set the bad value; a cycle is refused."""
    import shutil

    from posttrain.config.pipeline import ConfigError
    from posttrain.config.loading import load_config

    (tmp_path / "pyproject.toml").touch()
    shutil.copy(ROOT / "configs" / "smoke.yaml", tmp_path / "base.yaml")
    (tmp_path / "child.yaml").write_text("extends: base.yaml\nseed: 5\nworld: {seed: 9}\n"
                                         "stages:\n  general_rl:\n    trainer: {max_steps: 0}\n")
    with pytest.raises(ConfigError, match=r"child\.yaml:6: stages\.general_rl\.trainer\.max_steps"):
        load_config(tmp_path / "child.yaml")
    (tmp_path / "child.yaml").write_text("extends: base.yaml\nseed: 5\nworld: {seed: 9}\n")
    cfg = load_config(tmp_path / "child.yaml")
    base = load_config(tmp_path / "base.yaml")
    assert (cfg.seed, cfg.world.seed, cfg.world.math_train) == (5, 9, base.world.math_train)
    assert cfg.stage("general_rl") == base.stage("general_rl")
    text = (tmp_path / "base.yaml").read_text()
    (tmp_path / "base.yaml").write_text(text.replace("  math_train: 400", "  math_train: -1"))
    line = text.splitlines().index("  math_train: 400") + 1
    with pytest.raises(ConfigError, match=rf"base\.yaml:{line}: world\.math_train"):
        load_config(tmp_path / "child.yaml")
    (tmp_path / "base.yaml").write_text("- a list\n")
    with pytest.raises(ConfigError, match=r"base\.yaml is extended by .*child\.yaml, so it must be a mapping"):
        load_config(tmp_path / "child.yaml")
    (tmp_path / "base.yaml").write_text("extends: child.yaml\n" + text)
    with pytest.raises(ConfigError, match="which extends it back"):
        load_config(tmp_path / "child.yaml")
