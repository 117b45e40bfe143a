"""Registry against a real MLflow SQLite store in tmp_path (no mocks)."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from posttrain.registry.model_registry import Registry, candidate_alias
from posttrain.schema import CheckpointRef, GateCheck, GateVerdict


def _ckpt(tmp_path, name: str, digest: str, num_parameters: int | None = None) -> CheckpointRef:
    d = tmp_path / "ckpts" / name
    d.mkdir(parents=True)
    (d / "model.safetensors").write_bytes(b"\0" * 64)
    return CheckpointRef(path=str(d), digest=digest, num_parameters=num_parameters)


def _verdict(stage: str, passed: bool) -> GateVerdict:
    return GateVerdict(
        stage=stage,
        passed=passed,
        checks=[
            GateCheck(name="accuracy", value=0.61, threshold=0.5, passed=True),
            GateCheck(name="regression", value=float("nan"), threshold=0.0, passed=passed,
                      detail="paired test"),
        ],
    )


@pytest.fixture(scope="module")
def migrated_db(tmp_path_factory):
    """A schema-migrated mlflow.db built once: a fresh store runs ~100 DDL commits (each an fsync,
    seconds on a busy disk), so each test starts from a copy of this file instead."""
    root = tmp_path_factory.mktemp("template")
    Registry(root, model_name="template")
    return root / "mlflow.db"


@pytest.fixture
def reg(tmp_path, migrated_db):
    root = tmp_path / "registry"
    root.mkdir()
    shutil.copyfile(migrated_db, root / "mlflow.db")
    return Registry(root)


def test_register_versions_and_tags_round_trip(reg, tmp_path):
    from mlflow.telemetry.client import get_telemetry_client

    assert get_telemetry_client() is None  # telemetry off: nothing may reach the network

    c1 = _ckpt(tmp_path, "cold", "sha256:aaa", num_parameters=1234)
    c2 = _ckpt(tmp_path, "rl", "sha256:bbb")
    lineage = {
        "flow_run": "fr-1",
        "config_hash": "cfg123",
        "code_revision": "deadbeef",
        "dataset/sft": "md5:0123",
        "verifier/math": "v2",
    }
    v1 = reg.register("cold_start_sft", c1, lineage)
    v2 = reg.register("reasoning_rl", c2, {"flow_run": "fr-1", "parent_version": v1})
    assert (v1, v2) == ("1", "2")

    got = reg.get(v1)
    assert got["version"] == "1"
    assert got["stage"] == "cold_start_sft"
    assert got["source"] == str(c1.directory.resolve())  # the directory itself, not a copy
    assert got["tags"] == {
        **lineage, "stage": "cold_start_sft", "digest": "sha256:aaa", "num_parameters": "1234",
    }
    assert got["aliases"] == []
    assert reg.get(v2)["tags"]["parent_version"] == "1"
    # no weights were copied into the registry's artifact store
    assert not any(p.is_file() for p in reg.artifact_root.rglob("*"))

    assert [v["version"] for v in reg.versions()] == ["1", "2"]
    assert [v["stage"] for v in reg.versions()] == ["cold_start_sft", "reasoning_rl"]

    # persisted: a new Registry on the same root sees the same versions and numbering continues
    again = Registry(reg.root)
    assert [v["tags"]["digest"] for v in again.versions()] == ["sha256:aaa", "sha256:bbb"]
    assert again.register("cold_start_sft", _ckpt(tmp_path, "c3", "sha256:ccc"), {}) == "3"

    # MLflow's tag-key rule is enforced before anything is written
    with pytest.raises(Exception, match="Invalid value"):
        reg.register("cold_start_sft", c1, {"bad|key": "x"})
    assert len(reg.versions()) == 3


def test_alias_moves_only_on_passed_gate(reg, tmp_path):
    stage = "cold_start_sft"
    alias = candidate_alias(stage)
    assert alias == "candidate-cold_start_sft"
    v1 = reg.register(stage, _ckpt(tmp_path, "a", "d1"), {})
    v2 = reg.register(stage, _ckpt(tmp_path, "b", "d2"), {})
    v3 = reg.register(stage, _ckpt(tmp_path, "c", "d3"), {})
    other = reg.register("reasoning_rl", _ckpt(tmp_path, "d", "d4"), {})

    assert reg.alias(alias) is None
    reg.record_gate(v1, _verdict(stage, True))
    assert reg.alias(alias) == v1
    assert reg.get(v1)["tags"]["gate"] == "passed"
    assert "status" not in reg.get(v1)["tags"]
    checks = json.loads(reg.get(v1)["tags"]["gate_checks"])
    assert [c["name"] for c in checks] == ["accuracy", "regression"]
    assert checks[0]["value"] == 0.61 and checks[1]["value"] is None  # NaN -> null, strict JSON

    reg.record_gate(v2, _verdict(stage, False))
    assert reg.alias(alias) == v1  # a failed gate does not move the alias
    t2 = reg.get(v2)["tags"]
    assert (t2["gate"], t2["status"]) == ("failed", "rejected")
    assert reg.get(v2)["aliases"] == []

    reg.record_gate(v3, _verdict(stage, True))
    assert reg.alias(alias) == v3
    assert reg.get(v3)["aliases"] == [alias] and reg.get(v1)["aliases"] == []
    assert {v["version"]: v["aliases"] for v in reg.versions()} == {
        v1: [], v2: [], v3: [alias], other: [],
    }
    # other stages' aliases are independent
    assert reg.alias(candidate_alias("reasoning_rl")) is None
    reg.record_gate(other, _verdict("reasoning_rl", True))
    assert reg.alias(candidate_alias("reasoning_rl")) == other
    assert reg.alias(alias) == v3


def test_rejected_version_never_becomes_candidate(reg, tmp_path):
    stage = "general_rl"
    alias = candidate_alias(stage)
    v1 = reg.register(stage, _ckpt(tmp_path, "a", "d1"), {})
    reg.record_gate(v1, _verdict(stage, False))
    assert reg.alias(alias) is None
    with pytest.raises(ValueError, match="rejected"):
        reg.record_gate(v1, _verdict(stage, True))
    assert reg.alias(alias) is None
    assert reg.get(v1)["tags"]["status"] == "rejected"

    # re-evaluating the current candidate as failed takes the alias away (fail closed)
    v2 = reg.register(stage, _ckpt(tmp_path, "b", "d2"), {})
    reg.record_gate(v2, _verdict(stage, True))
    assert reg.alias(alias) == v2
    reg.record_gate(v2, _verdict(stage, False))
    assert reg.alias(alias) is None
    assert reg.get(v2)["tags"]["status"] == "rejected"

    # a verdict for another stage is refused
    v3 = reg.register(stage, _ckpt(tmp_path, "c", "d3"), {})
    with pytest.raises(ValueError, match="stage"):
        reg.record_gate(v3, _verdict("distillation", True))
    assert "gate" not in reg.get(v3)["tags"]


def test_training_run_logged_and_readable(reg, tmp_path):
    metric_log = [
        {"step": s, "loss": 2.0 / (s + 1), "lr": 1e-5, "note": "text is skipped", "ok": True}
        for s in range(0, 50, 10)
    ]
    params = {"lr": 1e-5, "epochs": 2, "lora": {"r": 8}, "name": "cold"}
    run_id = reg.log_training("cold_start_sft", params, metric_log,
                              {"flow_run": "fr-9", "config_hash": "c0ffee"})
    v = reg.register("cold_start_sft", _ckpt(tmp_path, "a", "d1"), {}, run_id=run_id)
    assert reg.get(v)["run_id"] == run_id

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=reg.uri)  # an independent reader
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "cold_start_sft"
    assert client.get_experiment(run.info.experiment_id).name == reg.model_name
    assert run.data.tags["stage"] == "cold_start_sft"
    assert run.data.tags["flow_run"] == "fr-9"
    assert run.data.params == {"lr": "1e-05", "epochs": "2", "lora": '{"r": 8}', "name": "cold"}
    hist = client.get_metric_history(run_id, "loss")
    assert [(m.step, m.value) for m in sorted(hist, key=lambda m: m.step)] == [
        (s, 2.0 / (s + 1)) for s in range(0, 50, 10)
    ]
    assert set(run.data.metrics) == {"loss", "lr"}
    assert math.isclose(run.data.metrics["loss"], 2.0 / 41)

    # a second execution of the same stage is a second run in the same experiment
    run2 = reg.log_training("cold_start_sft", {}, [{"step": 0, "loss": 1.0}], {})
    assert run2 != run_id
    assert client.get_run(run2).info.experiment_id == run.info.experiment_id


def _open_registry(root: str) -> None:
    from posttrain.registry.model_registry import Registry

    Registry(Path(root), model_name="posttrain-race")


@pytest.mark.slow   # processes racing on one registry (20-30 s): make test-all and CI run it
def test_processes_opening_a_new_registry_at_once_all_succeed(tmp_path):
    # A run and `posttrain status` creating the database together used to fail one of them with
    # "table ... already exists" (both ran MLflow's schema migration).
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_open_registry, args=(str(tmp_path / "registry"),)) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert [w.exitcode for w in workers] == [0, 0, 0]


def test_metric_names_mlflow_refuses_are_spelled_out_and_stay_distinct(tmp_path):
    from posttrain.registry.model_registry import Registry, metric_name

    assert metric_name("sampler/success/L1+") == "sampler/success/L1_plus_"
    assert metric_name("sampler/success/L2*") == "sampler/success/L2_times_"
    assert metric_name("rewards/correctness/mean") == "rewards/correctness/mean"
    registry = Registry(tmp_path / "registry", model_name="posttrain-names")
    run_id = registry.log_training("reasoning_rl", {}, [{"step": 1, "sampler/success/L1+": 0.5,
                                                         "sampler/success/L1*": 0.25}], {})
    logged = registry.client.get_run(run_id).data.metrics
    assert logged == {"sampler/success/L1_plus_": 0.5, "sampler/success/L1_times_": 0.25}


def _register_once_in_a_process(root: str, digest: str, queue) -> None:
    from posttrain.registry.model_registry import Registry
    from posttrain.schema import CheckpointRef

    registry = Registry(Path(root), model_name="posttrain-race")
    queue.put(registry.register_once("cold_start_sft", CheckpointRef(path=root, digest=digest), {"flow_run": "r"}))


@pytest.mark.slow   # processes racing on one registry (20-30 s): make test-all and CI run it
def test_two_runs_finishing_the_same_stage_at_once_register_it_once(tmp_path):
    """Two runs of one project reach the same checkpoint together: one version, found by both."""
    import multiprocessing

    from posttrain.registry.model_registry import Registry

    Registry(tmp_path, model_name="posttrain-race")   # created once, as a run's start does
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_register_once_in_a_process, args=(str(tmp_path), "sha256:same", queue))
               for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    results = [queue.get(timeout=10) for _ in workers]
    assert len({version for version, _ in results}) == 1
    assert sorted(created for _, created in results) == [False, False, False, True]
    assert len(Registry(tmp_path, model_name="posttrain-race").versions()) == 1


def test_a_version_whose_checkpoint_was_altered_is_restored_when_the_stage_recomputes_it(reg, tmp_path):
    """The stage recomputed an altered checkpoint in a new run's folder (same digest): the version
    that pointed at the altered copy serves the digest it was registered with again."""
    from posttrain.registry.checkpoint import seal
    from posttrain.registry.promotion import check_promotable

    first = tmp_path / "run1" / "checkpoint"
    first.mkdir(parents=True)
    (first / "model.safetensors").write_bytes(b"weights" * 10)
    ref = CheckpointRef(path=str(first), digest=seal(first))
    version = reg.register_stage("reasoning_rl", ref, {}, _verdict("reasoning_rl", True))
    (first / "model.safetensors").write_bytes(b"tampered" * 10)
    assert any("altered" in p for p in check_promotable(reg, version))

    second = tmp_path / "run2" / "checkpoint"
    shutil.copytree(first.parent.parent / "run1" / "checkpoint", second)
    (second / "model.safetensors").write_bytes(b"weights" * 10)
    recomputed = CheckpointRef(path=str(second), digest=seal(second))
    assert recomputed.digest == ref.digest
    assert reg.register_stage("reasoning_rl", recomputed, {}, _verdict("reasoning_rl", True)) == version
    assert check_promotable(reg, version) == []
    assert (first / "model.safetensors").read_bytes() == b"weights" * 10
    assert reg.get(version)["tags"]["restored_from"] == str(second)

    shutil.rmtree(first)   # gone altogether: restored too
    assert reg.register_stage("reasoning_rl", recomputed, {}, _verdict("reasoning_rl", True)) == version
    assert check_promotable(reg, version) == []
