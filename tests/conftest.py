"""Shared fixtures: one smoke world and one smoke run per session, offline settings, and the
smoke config written as a project of its own."""
from pathlib import Path

import pytest

from posttrain.env import configure_offline

ROOT = Path(__file__).resolve().parent.parent
configure_offline()


def write_smoke_config(root: Path, **stage_trainer: dict) -> Path:
    """configs/smoke.yaml as a project of its own under ``root`` (world, runs, registry, data store
    all inside it); ``stage_trainer``: per stage, trainer settings to override."""
    import yaml

    cfg = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    cfg["paths"] = {"world": "data", "runs": "runs", "registry": "runs/registry",
                    "data_store": "runs/data-store", "dvc_remote": "runs/dvc-remote"}
    for stage, trainer in stage_trainer.items():
        cfg["stages"][stage]["trainer"].update(trainer)
    path = root / "smoke.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def config_error(tmp_path: Path, text: str) -> str:
    """The ConfigError message of loading ``text`` as tmp_path/c.yaml (fails if it loads)."""
    from posttrain.config.pipeline import ConfigError
    from posttrain.config.loading import load_config

    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    return str(err.value)


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    from posttrain.world.tokenizer import build_tokenizer

    return build_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def overlaps(train: dict[str, list[dict]], evals: dict[str, list[dict]]) -> list:
    """The run's contamination check (posttrain.data.decontamination, default settings) on plain rows."""
    from posttrain.data.decontamination import DecontaminationConfig, find_contamination
    from posttrain.data.sources import RoleData

    def wrap(rows_by_name):
        return {name: RoleData(rows=rows) for name, rows in rows_by_name.items()}
    return find_contamination(wrap(train), wrap(evals), DecontaminationConfig())


def cold_start_inputs(tmp_path: Path, run: str):
    """The smoke world's cold-start stage, ready to launch: (config, parent checkpoint, StageInputs)
    working under tmp_path/runs/<run>/cold_start_sft."""
    from posttrain.config.loading import load_config
    from posttrain.data.prepared import prepare
    from posttrain.schema import StageInputs
    from posttrain.world.build import base_checkpoint, ensure_world

    config = write_smoke_config(tmp_path, cold_start_sft={"threads": 1, "batch_size": 8})
    cfg = load_config(config)
    ensure_world(cfg)
    data = prepare(cfg, tmp_path / "runs" / "prepared", ("cold_start_sft",))
    parent = base_checkpoint(cfg)
    inputs = StageInputs(parent=parent, work_dir=str(tmp_path / "runs" / run / "cold_start_sft"), seed=0,
                         model=cfg.base.settings(), data=data.for_stage("cold_start_sft"))
    return cfg, parent, inputs
