"""The example configs under configs/examples/ (recipes for real models on GPUs, not run here) load
and validate as they are, without their models or data being present, and give every stage the
data it reads."""
from pathlib import Path

import pytest

from conftest import ROOT
from posttrain.config.pipeline import STAGE_TABLE
from posttrain.config.loading import load_config

EXAMPLES = sorted((ROOT / "configs" / "examples").glob("*.yaml"))


def test_there_are_example_configs():
    assert EXAMPLES, "configs/examples/ holds no example config"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_config_validates_without_its_data(path: Path, tmp_path: Path):
    # An empty project directory: nothing the config names exists, so validation cannot have read it.
    cfg = load_config(path, project_root=tmp_path)
    assert not any(tmp_path.iterdir())
    assert cfg.base.model != "embedded", "an example is for a real model"
    for stage in STAGE_TABLE:
        assert all(cfg.data.roles()[role] for role in stage.reads), f"{path.name}: {stage.name} has no data"
    assert cfg.data.suites(), f"{path.name}: no evaluation suite"
