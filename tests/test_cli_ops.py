"""`posttrain status | promote | rollback | history | lineage | evaluate | resume`, called in-process.

Registry and reports are fakes in tmp_path (see test_promotion); `evaluate` gets a stand-in for the
model evaluation; `resume` retries a small failing flow on a temporary Prefect server, and a RUNNING
one only once the process its record names is gone (posttrain/orchestration/liveness.py).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from posttrain import cli
from test_promotion import ACTOR, MODEL, migrated_db, new_registry, populate  # noqa: F401  (fixture)

pytestmark = pytest.mark.timeout(180)


def _report(runs: Path, run_id: str, stages: list[tuple], mtime: float) -> None:
    d = runs / run_id
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for name, status, cached, gate, version in stages:
        checks = [] if gate is None else [{"name": "math/accuracy >= 0.1", "value": 0.5 if gate else 0.01,
                                           "threshold": 0.1, "passed": gate, "detail": ""}]
        out.append({"name": name, "status": status, "cached": cached, "wall_s": 12.0,
                    "gate": None if gate is None else {"stage": name, "passed": gate, "checks": checks},
                    "checkpoint": {"path": "/x", "digest": "sha256:0", "version": version}})
    (d / "report.json").write_text(json.dumps({"run_id": run_id, "config": "ops.yaml", "wall_s": 99.0, "stages": out}))
    os.utime(d / "report.json", (mtime, mtime))


@pytest.fixture
def project(tmp_path, migrated_db):  # noqa: F811
    runs = tmp_path / "runs"
    reg = new_registry(tmp_path, migrated_db)
    refs = populate(reg, tmp_path)
    config = tmp_path / "ops.yaml"
    config.write_text(yaml.safe_dump({"name": MODEL.removeprefix("posttrain-"), "paths": {
        "world": str(tmp_path / "data"), "runs": str(runs), "registry": str(reg.root),
        "data_store": str(runs / "data-store"), "dvc_remote": str(runs / "dvc-remote")}}))
    _report(runs, "run-a", [("base", "passed", True, None, None), ("cold_start_sft", "passed", False, True, "1"),
                            ("reasoning_rl", "passed", False, True, "2")], mtime=1_000_000)
    _report(runs, "run-b", [("base", "passed", True, None, None), ("cold_start_sft", "passed", True, True, "1"),
                            ("reasoning_rl", "passed", True, True, "2"),
                            ("mode_fusion_sft", "failed", False, False, "3")], mtime=2_000_000)
    return {"config": str(config), "registry": reg, "refs": refs, "root": tmp_path}


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(code, err, pattern):
    assert code == 2
    assert err.startswith("error: ") and err.strip().count("\n") == 0, err
    assert re.search(pattern, err), err


def test_status(project, capsys):
    cfg = project["config"]
    code, out, _ = run(capsys, "status", "--config", cfg)
    assert code == 0
    assert out.startswith("run run-b: FAILED at mode_fusion_sft  (wall 99 s")
    lines = out.splitlines()
    assert any(line.split()[:5] == ["reasoning_rl", "passed", "yes", "passed", "12"] for line in lines), out
    assert any(line.split()[:4] == ["mode_fusion_sft", "failed", "no", "FAILED"] for line in lines), out
    assert "mode_fusion_sft: failed check math/accuracy >= 0.1 = 0.010" in out
    assert "production: (none)" in out
    code, out, _ = run(capsys, "status", "run-a", "--config", cfg)
    assert code == 0 and out.startswith("run run-a: passed")
    _one_line_error(*run(capsys, "status", "nope", "--config", cfg)[::2], r"no report for run nope")


def test_status_of_a_report_that_does_not_validate_is_one_line_error(project, capsys):
    cfg, report = project["config"], project["root"] / "runs" / "run-a" / "report.json"
    report.write_text("{not json")
    _one_line_error(*run(capsys, "status", "run-a", "--config", cfg)[::2], r"cannot read .*report\.json: .*JSON")
    report.write_text(json.dumps({"run_id": "run-a", "stages": [{"name": "cold_start_sft", "status": "maybe"}]}))
    _one_line_error(*run(capsys, "status", "run-a", "--config", cfg)[::2],
                    r"cannot read .*report\.json: stages\.0\.status: Input should be 'passed', 'failed' or 'skipped'")


def test_status_tells_a_killed_run_from_a_running_one(project, capsys):
    import subprocess

    from posttrain.orchestration import liveness

    cfg, runs = project["config"], project["root"] / "runs"
    child = subprocess.Popen(["sleep", "60"])
    gone = liveness.identify(child.pid)
    child.kill()
    child.wait()
    record = liveness.RunProcess(process=gone, attempt="s", started="2026-11-29T00:00:00+00:00")
    (runs / "run-b" / liveness.RECORD_FILE).write_text(record.model_dump_json())
    code, out, _ = run(capsys, "status", "run-b", "--config", cfg)
    assert code == 0 and out.startswith("run run-b: crashed (process gone), FAILED at mode_fusion_sft"), out
    assert f"pid {child.pid} on {gone.host} ended without finishing the run" in out and "posttrain resume run-b" in out

    alive = record.model_copy(update={"process": liveness.this_process()})
    (runs / "run-b" / liveness.RECORD_FILE).write_text(alive.model_dump_json())
    code, out, _ = run(capsys, "status", "run-b", "--config", cfg)
    assert out.startswith(f"run run-b: running (pid {os.getpid()} on ")

    # Ended with an error outside any stage: the report alone would say passed.
    failed = record.model_copy(update={"ended": "2026-11-29T00:01:00+00:00", "error": "RuntimeError: registry down"})
    (runs / "run-a" / liveness.RECORD_FILE).write_text(failed.model_dump_json())
    code, out, _ = run(capsys, "status", "run-a", "--config", cfg)
    assert out.startswith("run run-a: FAILED (RuntimeError: registry down)"), out


def test_promote_rollback_history(project, capsys):
    cfg = project["config"]
    _one_line_error(*run(capsys, "promote", "3", "--config", cfg)[::2],
                    r"version 3 cannot become production: it was rejected")
    _one_line_error(*run(capsys, "promote", "3", "--force", "--config", cfg)[::2], r"force needs a non-empty reason")
    code, out, _ = run(capsys, "promote", "3", "--force", "--reason", "demo", "--config", cfg)
    assert code == 0 and out.startswith("production: (none) -> 3 (mode_fusion_sft) [force-promote by ")
    assert "overridden: it was rejected" in out
    code, out, _ = run(capsys, "promote", "reasoning_rl", "--config", cfg)
    assert code == 0 and out.startswith("production: 3 -> 2 (reasoning_rl) [promote by ")
    # rolling back onto the force-promoted, rejected 3 goes through the checks again
    _one_line_error(*run(capsys, "rollback", "--config", cfg)[::2], r"version 3 cannot become production")
    code, out, _ = run(capsys, "rollback", "--to", "1", "--reason", "smoke test", "--config", cfg)
    assert code == 0 and out.startswith("production: 2 -> 1 (cold_start_sft) [rollback by ")
    assert "reason: smoke test" in out
    _one_line_error(*run(capsys, "promote", "1", "--config", cfg)[::2], r"version 1 is already production")
    _one_line_error(*run(capsys, "promote", "distillation", "--config", cfg)[::2], r"candidate-distillation")

    code, out, _ = run(capsys, "history", "--config", cfg)
    assert code == 0
    rows = [line.split() for line in out.splitlines()[2:-1]]
    assert [r[1:4] for r in rows] == [["force-promote", "–", "3"], ["promote", "3", "2"], ["rollback", "2", "1"]]
    assert out.splitlines()[-1] == "production: 1"
    code, out, _ = run(capsys, "history", "--json", "--config", cfg)
    entries = json.loads(out)
    assert [e["to"] for e in entries] == ["3", "2", "1"] and entries[0]["reason"] == "demo"
    assert all(re.fullmatch(r"[^@\s]+@[^@\s]+", e["actor"]) for e in entries), entries  # user@host
    code, out, _ = run(capsys, "status", "--config", cfg)
    assert "production: 1 (cold_start_sft)" in out


def test_lineage(project, capsys):
    cfg = project["config"]
    code, out, _ = run(capsys, "lineage", "5", "--config", cfg)
    assert code == 0
    heads = [line.split()[:2] for line in out.splitlines() if not line.startswith(" ")]
    assert heads == [["v5", "general_rl"], ["v4", "mode_fusion_sft"], ["v2", "reasoning_rl"],
                     ["v1", "cold_start_sft"], ["base", "digest"]]
    assert "flow run run-b  config cfgb  code revb  seed 0" in out
    assert "consumed rejection_sampled.jsonl  md5 md5-rs" in out
    assert "verifiers math=math-verifier/1" in out
    code, out, _ = run(capsys, "lineage", "mode_fusion_sft", "--json", "--config", cfg)
    assert code == 0 and json.loads(out)[0]["version"] == "4"
    _one_line_error(*run(capsys, "lineage", "99", "--config", cfg)[::2], r"has no version 99")


def test_missing_registry_and_config(tmp_path, capsys):
    config = tmp_path / "empty.yaml"
    config.write_text(yaml.safe_dump({"name": "empty", "paths": {"runs": str(tmp_path / "r"),
                                                                 "registry": str(tmp_path / "r" / "registry")}}))
    _one_line_error(*run(capsys, "history", "--config", str(config))[::2], r"no registry at .*run the pipeline")
    _one_line_error(*run(capsys, "status", "--config", str(config))[::2], r"no runs under")
    code, _, err = run(capsys, "promote", "1", "--config", str(tmp_path / "nope.yaml"))
    assert code == 2 and "does not exist" in err


def test_evaluate_compares_with_production(project, capsys, monkeypatch):
    from posttrain.evaluation import suites as evaluation
    from posttrain.registry import promotion
    from posttrain.schema import EvalResult

    seen = []

    def fake_evaluate(ref, cfg, **kwargs):  # stands in for generation on the held-out suites
        seen.append(ref.version)
        good = ref.version == "4"
        items = [1.0] * (70 if good else 30) + [0.0] * (30 if good else 70)
        return EvalResult(metrics={"math/accuracy": sum(items) / 100, "math/len_correct": 20.0 if good else 25.0},
                          per_item={"math/accuracy": items})

    monkeypatch.setattr(evaluation, "evaluate", fake_evaluate)
    cfg = project["config"]
    code, out, _ = run(capsys, "evaluate", "4", "--config", cfg)
    assert code == 0 and seen == ["4"] and "(no production version to compare with)" in out
    promotion.promote(project["registry"], "2", actor=ACTOR)
    seen.clear()
    code, out, _ = run(capsys, "evaluate", "mode_fusion_sft", "--config", cfg)
    assert code == 0 and seen == ["4", "2"]
    assert "production v2" in out.splitlines()[0]
    row = next(line.split() for line in out.splitlines() if line.startswith("math/accuracy"))
    assert row[1:4] == ["0.700", "0.300", "+0.400"] and row[-1] == "better"
    code, out, _ = run(capsys, "evaluate", "4", "--json", "--config", cfg)
    assert json.loads(out)["comparison"][0]["verdict"] == "better"
    (project["refs"]["5"].directory / "config.json").write_text("{}")
    _one_line_error(*run(capsys, "evaluate", "5", "--config", cfg)[::2], r"missing or altered")


# ---------------------------------------------------------------------------------- resume

from prefect import flow  # noqa: E402


@flow(name="ops-flaky")
def flaky(marker: str) -> str:
    """Fails on its first attempt (creates the marker), succeeds once the marker exists."""
    path = Path(marker)
    if not path.exists():
        path.write_text("attempt 1")
        raise RuntimeError("first attempt fails")
    path.write_text(path.read_text() + "\nattempt 2")
    return "ok"


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):  # its own server on 127.0.0.1, stopped after
        yield


def test_resume_retries_the_failed_run_in_place(harness, project, capsys, monkeypatch):
    from uuid import uuid4

    from prefect.client.orchestration import get_client

    from flows import commands

    monkeypatch.setitem(commands.FLOW_ENTRYPOINTS, "ops-flaky", "test_cli_ops:flaky")
    cfg = project["config"]
    marker = project["root"] / "marker.txt"
    state = flaky(str(marker), return_state=True)
    assert state.is_failed()
    run_id = str(state.state_details.flow_run_id)

    code, out, err = run(capsys, "resume", run_id, "--config", cfg)
    assert code == 0, err
    assert f"resuming flow run {run_id}" in out and f"flow run {run_id} completed" in out
    assert marker.read_text().splitlines() == ["attempt 1", "attempt 2"]
    with get_client(sync_client=True) as client:
        fr = client.read_flow_run(run_id)
        assert fr.state.is_completed() and fr.run_count == 2   # the same run, a second attempt
        names = [s.name for s in client.read_flow_run_states(run_id)]
    assert "AwaitingRetry" in names and names.index("AwaitingRetry") > names.index("Failed")

    _one_line_error(*run(capsys, "resume", run_id, "--config", cfg)[::2], r"already completed")
    _one_line_error(*run(capsys, "resume", str(uuid4()), "--config", cfg)[::2], r"not found")


def test_operation_flows_record_their_flow_run_and_publish_artifacts(harness, project, monkeypatch):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.serve import deployments, evaluate_flow, promote_flow, rollback_flow
    from posttrain.evaluation import suites as evaluation
    from posttrain.registry import promotion
    from posttrain.schema import EvalResult

    monkeypatch.setattr(evaluation, "evaluate", lambda ref, cfg, **kw: EvalResult(
        metrics={"math/accuracy": 0.5}, per_item={"math/accuracy": [1.0, 0.0] * 10}))
    cfg, reg = project["config"], project["registry"]
    ok = promote_flow(version="1", config_path=cfg, return_state=True)
    assert ok.is_completed()
    promote_flow(version="reasoning_rl", reason="ui", config_path=cfg)
    refused = promote_flow(version="3", config_path=cfg, return_state=True)
    assert refused.is_failed() and "it was rejected" in refused.message
    back = rollback_flow(config_path=cfg, return_state=True)
    assert back.is_completed() and back.result()["to"] == "1"
    entries = promotion.history(reg)
    assert [e["to"] for e in entries] == ["1", "2", "1"]
    assert entries[0]["actor"] == f"flow-run:{ok.state_details.flow_run_id}"
    assert entries[2]["actor"] == f"flow-run:{back.state_details.flow_run_id}"
    out = evaluate_flow(version="2", config_path=cfg)
    assert out["production"] == "1" and out["comparison"][0]["verdict"] == "same"
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=["production-history", "evaluation"])))
    kinds = {(a.key, a.type) for a in arts}
    assert kinds == {("production-history", "markdown"), ("evaluation", "table")}
    latest = max((a for a in arts if a.key == "production-history"), key=lambda a: a.created)
    assert "**rollback**: 2 → **1**" in latest.data
    assert [d.name for d in deployments()] == ["pipeline", "promote", "rollback", "evaluate"]


@flow(name="ops-killed")
def killed(config_path: str) -> str:
    """Stands in for a pipeline run whose process was killed: it has a run folder (config_path)."""
    return "ok"


def test_resume_of_a_running_run_needs_its_process_provably_gone(harness, project, capsys, monkeypatch):
    import subprocess

    from prefect.client.orchestration import get_client
    from prefect.states import Pending, Running

    from flows import commands
    from posttrain.orchestration import liveness

    monkeypatch.setitem(commands.FLOW_ENTRYPOINTS, "ops-killed", "test_cli_ops:killed")
    cfg = project["config"]
    with get_client(sync_client=True) as client:
        running = client.create_flow_run(killed, parameters={"config_path": cfg}, state=Running())
        pending = client.create_flow_run(killed, parameters={"config_path": cfg}, state=Pending())
    run_dir = project["root"] / "runs" / str(running.id)

    def record(process, attempt):
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / liveness.RECORD_FILE).write_text(liveness.RunProcess(
            process=process, attempt=attempt, started="2026-11-29T00:00:00+00:00").model_dump_json())

    _one_line_error(*run(capsys, "resume", str(running.id), "--config", cfg)[::2],
                    r"is RUNNING and left no process record \(.*process.json is missing")
    _one_line_error(*run(capsys, "resume", str(pending.id), "--config", cfg)[::2],
                    r"is PENDING: the process that set it has not started the flow")
    record(liveness.this_process(), str(running.state.id))
    _one_line_error(*run(capsys, "resume", str(running.id), "--config", cfg)[::2],
                    rf"its process is alive: pid {os.getpid()} on .*kill {os.getpid()}")
    child = subprocess.Popen(["sleep", "60"])
    gone = liveness.identify(child.pid)
    child.kill()
    child.wait()
    record(gone, "an-earlier-running-state")
    _one_line_error(*run(capsys, "resume", str(running.id), "--config", cfg)[::2],
                    r"is the record of an earlier attempt")

    record(gone, str(running.state.id))
    code, out, err = run(capsys, "resume", str(running.id), "--config", cfg)
    assert code == 0, err
    assert f"pid {child.pid} on " in out and "marked Crashed" in out and f"flow run {running.id} completed" in out
    with get_client(sync_client=True) as client:
        assert client.read_flow_run(running.id).state.is_completed()
        names = [s.name for s in client.read_flow_run_states(running.id)]
    assert names.index("Running") < names.index("Crashed") < names.index("AwaitingRetry") < names.index("Completed")
