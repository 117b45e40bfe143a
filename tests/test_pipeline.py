"""End to end on the smoke config: real world build, real TRL steps, real Prefect flow runs, real
MLflow registry and DVC store, in a temporary project folder."""
import json
import shutil

import pytest
import yaml

from conftest import write_smoke_config

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="module")
def smoke_project(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    write_smoke_config(root)
    return root


CANARY = "posttrain-canary-secret-6d1f"


def _run(project, monkeypatch, fail_stage=None, **kwargs):
    from flows.pipeline import pipeline
    from flows.tasks import FAIL_STAGE_ENV

    # secrets live in the environment: none may reach a report, a tag, a log or a dataset
    monkeypatch.setenv("HF_TOKEN", CANARY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CANARY)

    if fail_stage:
        monkeypatch.setenv(FAIL_STAGE_ENV, fail_stage)
    else:
        monkeypatch.delenv(FAIL_STAGE_ENV, raising=False)
    state = pipeline(config_path=str(project / "smoke.yaml"), return_state=True, **kwargs)
    reports = sorted((project / "runs").glob("*/report.json"), key=lambda p: p.stat().st_mtime)
    return state, json.loads(reports[-1].read_text())


def _stage(report, name):
    return next(s for s in report["stages"] if s["name"] == name)


def test_failure_in_stage_4_then_resume_reuses_stages_1_to_3(prefect_harness, smoke_project, monkeypatch):
    state, report = _run(smoke_project, monkeypatch, fail_stage="mode_fusion_sft")
    assert state.is_failed()
    assert _stage(report, "mode_fusion_sft")["status"] == "failed"
    first = {s["name"]: s for s in report["stages"]}
    assert all(first[n]["status"] == "passed" for n in ("cold_start_sft", "reasoning_rl", "rejection_sampling"))

    state, report = _run(smoke_project, monkeypatch)
    assert state.is_completed(), state.message
    stages = {s["name"]: s for s in report["stages"]}
    for name in ("cold_start_sft", "reasoning_rl", "rejection_sampling"):
        assert stages[name]["cached"] is True, name
        assert stages[name]["checkpoint"]["digest"] == first[name]["checkpoint"]["digest"]
    for name in ("mode_fusion_sft", "general_rl", "distillation"):
        assert stages[name]["cached"] is False and stages[name]["status"] == "passed", name

    # report.json schema the issue names
    assert set(report) >= {"run_id", "wall_s", "stages"} and report["stages"][0]["name"] == "base"
    for s in report["stages"]:
        assert set(s) >= {"name", "status", "cached", "wall_s", "checkpoint", "gate", "eval"}
    assert set(stages["distillation"]["eval"]) >= {
        "math/accuracy", "math/accuracy_en", "math/accuracy_zh", "math/format", "math/language_consistency",
        "no_think/mode_compliance", "instruction/accuracy", "direct/accuracy", "math/len_correct",
        "math/len_wrong", "math/truncation"}
    run_dir = smoke_project / "runs" / report["run_id"]
    assert (run_dir / "report.md").read_text().count("|") > 50
    assert (run_dir / "capabilities.png").stat().st_size > 1000
    assert (run_dir / "rl.png").stat().st_size > 1000
    assert "reasoning_rl rollout policy: current policy at each step" in (run_dir / "report.md").read_text()
    assert "- rejection_sampling: kept_rows " in (run_dir / "report.md").read_text()   # what it made of its data
    from posttrain.env import machine  # where it ran: float results, and so gate verdicts, depend on the CPU type

    assert " cores, torch " in report["machine"] and report["machine"] == machine()
    assert f"machine: {report['machine']}" in (run_dir / "report.md").read_text()
    # the thinking-budget curve from mode fusion on (smoke: 10 items, budgets 0 and the median), its section and plot
    for name in ("mode_fusion_sft", "general_rl", "distillation"):
        curve = stages[name]["eval"]
        assert {"math/budget_0/accuracy", "math/budget_0/cut", "math/budget_unlimited/accuracy",
                "math/think_tokens"} <= set(curve), name
    assert not any("/budget_" in k for k in stages["reasoning_rl"]["eval"])
    assert "## Thinking vs non-thinking, and the thinking budget" in (run_dir / "report.md").read_text()
    assert (run_dir / "budget.png").stat().st_size > 1000
    assert stages["mode_fusion_sft"]["train_metrics"]["rows/thinking"] == 4       # data.thinking, limit 4
    assert stages["mode_fusion_sft"]["train_metrics"]["rows/non_reasoning"] == 8  # two sources of 4
    assert stages["general_rl"]["train_metrics"]["no_think_prompts"] >= 3  # general math rows 0-2 of 4 ask /no_think
    # both RL stages ran tool episodes and kept them as datasets of the run; the tool suite is reported
    for name in ("reasoning_rl", "general_rl"):
        episodes = [d for d in stages[name]["datasets"] if d["name"].endswith(f"{name}_trajectories.jsonl")]
        assert episodes and episodes[0]["rows"] > 0, name
    assert {"tool/accuracy", "tool/tool_calls", "tool/tool_errors"} <= set(stages["general_rl"]["eval"])

    from posttrain.registry.model_registry import Registry

    registry = Registry(smoke_project / "runs" / "registry", model_name="posttrain-smoke")
    # Every stage's checkpoint is a registered version (a stage that left the weights bit-identical,
    # as a smoke RL step with all-equal rewards can, shares its parent's version).
    for s in report["stages"][1:]:
        version = registry.get(s["checkpoint"]["version"])
        assert version["tags"]["digest"] == s["checkpoint"]["digest"], s["name"]
    assert registry.get(registry.alias("candidate-distillation"))["stage"] == "distillation"
    digests = [(v["stage"], v["tags"]["digest"]) for v in registry.versions()]
    assert len(digests) == len(set(digests)), "a cached stage was registered twice"

    leaked = [str(f) for f in smoke_project.rglob("*") if f.is_file() and CANARY.encode() in f.read_bytes()]
    assert not leaked, leaked

    # produced datasets are DVC-tracked and restorable
    from posttrain.data.store import DatasetStore
    from posttrain.schema import DatasetRef

    ref = DatasetRef(**stages["mode_fusion_sft"]["datasets"][0])
    store = DatasetStore(smoke_project / "runs" / "data-store")
    local = store.restore(ref)
    original = local.read_bytes()
    local.unlink()
    assert store.restore(ref).read_bytes() == original


def test_altered_or_deleted_cached_checkpoint_is_recomputed_and_its_version_repaired(prefect_harness, smoke_project,
                                                                                    monkeypatch):
    from pathlib import Path

    from posttrain.registry.promotion import check_promotable
    from posttrain.registry.model_registry import Registry

    state, report = _run(smoke_project, monkeypatch)
    assert state.is_completed()
    registry = Registry(smoke_project / "runs" / "registry", model_name="posttrain-smoke")
    for damage in ("alter", "delete"):
        victim = Path(_stage(report, "reasoning_rl")["checkpoint"]["path"])
        version = _stage(report, "reasoning_rl")["checkpoint"]["version"]
        if damage == "delete":
            shutil.rmtree(victim)
        else:
            (victim / "config.json").write_text((victim / "config.json").read_text() + " ")
        state, report = _run(smoke_project, monkeypatch)
        assert state.is_completed(), state.message
        assert _stage(report, "cold_start_sft")["cached"] is True
        assert _stage(report, "reasoning_rl")["cached"] is False and _stage(report, "reasoning_rl")["status"] == "passed"
        # the same inputs retrain the same weights in the new run's folder: the version that pointed
        # at the damaged copy is whole again, and promotable
        assert _stage(report, "reasoning_rl")["checkpoint"]["version"] == version
        assert not [p for p in check_promotable(registry, version) if "altered" in p or "missing" in p], damage


def test_failed_gate_fails_the_flow_and_rejects_the_checkpoint(prefect_harness, smoke_project, monkeypatch):
    cfg = yaml.safe_load((smoke_project / "smoke.yaml").read_text())
    cfg["stages"]["cold_start_sft"]["gate"] = {"targets": [{"metric": "math/format", "min": 1.01}], "regression": []}
    strict = smoke_project / "strict.yaml"
    strict.write_text(yaml.safe_dump(cfg))
    from flows.pipeline import pipeline

    state = pipeline(config_path=str(strict), return_state=True)
    assert state.is_failed() and "gate of cold_start_sft failed" in state.message

    from posttrain.registry.model_registry import Registry

    registry = Registry(smoke_project / "runs" / "registry", model_name="posttrain-smoke")
    rejected = [v for v in registry.versions() if v["tags"].get("gate") == "failed"]
    assert rejected and all(v["tags"].get("status") == "rejected" for v in rejected)
