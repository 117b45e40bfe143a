"""The served deployments through the Prefect API, as the UI uses them: a real `prefect server start`
(127.0.0.1, temporary database) and `python -m flows.serve` (what `make ui` runs), then flow runs
created through the API on the smoke config: pipeline, promote, rollback, evaluate, a refused
promote, parameter validation, and `posttrain resume` of a failed deployment run (what the UI's
Retry does), picked up by the live runner.

Runs real (smoke-sized) training: minutes on 2 cores.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from conftest import ROOT, write_smoke_config

pytestmark = [pytest.mark.timeout(1500), pytest.mark.slow]  # make test-all and CI run it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prefect server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} not healthy after {timeout} s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(api_url, smoke project dir) with a server and `python -m flows.serve` running."""
    home = tmp_path_factory.mktemp("prefect-home")
    project = tmp_path_factory.mktemp("project")
    write_smoke_config(project)

    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "PREFECT_RUNNER_POLL_FREQUENCY": "2",
           "POSTTRAIN_CONFIG_DIRS": str(project)}   # the served flows read configs from the test's project only
    env.pop("PREFECT_API_URL", None)
    env.pop("POSTTRAIN_FAIL_STAGE", None)
    server = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                               "--port", str(port), "--analytics-off"], env=env, cwd=ROOT,
                              stdout=open(home / "server.log", "w"), stderr=subprocess.STDOUT)
    runner = None
    try:
        _wait_healthy(url, server)
        runner = subprocess.Popen([sys.executable, "-m", "flows.serve"], env={**env, "PREFECT_API_URL": url},
                                  cwd=ROOT, stdout=open(home / "serve.log", "w"), stderr=subprocess.STDOUT)
        from prefect.settings import PREFECT_API_URL, temporary_settings

        with temporary_settings({PREFECT_API_URL: url}):
            _wait_deployments(runner, home)
            yield url, project, home
    finally:
        if runner is not None:
            _stop(runner)
        _stop(server)


NAMES = ("posttrain-pipeline/pipeline", "posttrain-promote/promote", "posttrain-rollback/rollback",
         "posttrain-evaluate/evaluate")


def _wait_deployments(runner: subprocess.Popen, home, timeout: float = 180) -> None:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            if runner.poll() is not None:
                raise RuntimeError(f"flows.serve exited: {(home / 'serve.log').read_text()[-3000:]}")
            try:
                deps = [client.read_deployment_by_name(n) for n in NAMES]
                if all(d.last_polled is not None for d in deps):
                    return
            except ObjectNotFound:
                pass
            time.sleep(1)
    raise TimeoutError("deployments were not served in time")


def _run(name: str, timeout: float = 900, **parameters):
    from prefect.deployments import run_deployment

    return run_deployment(name, parameters=parameters, timeout=timeout)


def _registry(project):
    from posttrain.registry.model_registry import Registry

    return Registry(project / "runs" / "registry", model_name="posttrain-smoke")


def test_pipeline_promote_rollback_evaluate_through_the_api(served):
    from prefect.client.orchestration import get_client

    from posttrain.registry import promotion

    url, project, home = served
    config = str(project / "smoke.yaml")
    run = _run("posttrain-pipeline/pipeline", config_path=config)
    assert run.state.is_completed(), (run.state.message, (home / "serve.log").read_text()[-3000:])
    reg = _registry(project)
    assert reg.alias("candidate-distillation") is not None

    first = _run("posttrain-promote/promote", timeout=300, version="cold_start_sft", config_path=config)
    assert first.state.is_completed(), first.state.message
    second = _run("posttrain-promote/promote", timeout=300, version="distillation", reason="from the UI",
                  config_path=config)
    assert second.state.is_completed(), second.state.message
    entries = promotion.history(reg)
    assert [e["actor"] for e in entries] == [f"flow-run:{first.id}", f"flow-run:{second.id}"]
    assert entries[-1]["to"] == reg.alias("candidate-distillation") == reg.alias("production")

    refused = _run("posttrain-promote/promote", timeout=300, version="99", config_path=config)
    assert refused.state.is_failed()
    assert len(promotion.history(reg)) == 2

    back = _run("posttrain-rollback/rollback", timeout=300, reason="drill", config_path=config)
    assert back.state.is_completed(), back.state.message
    assert reg.alias("production") == entries[0]["to"]
    assert promotion.history(reg)[-1]["actor"] == f"flow-run:{back.id}"

    ev = _run("posttrain-evaluate/evaluate", timeout=600, version="distillation", config_path=config)
    assert ev.state.is_completed(), ev.state.message

    with get_client(sync_client=True) as client:
        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

        keys = {a.key for a in client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=["production-history", "evaluation"])))}
    assert keys == {"production-history", "evaluation"}


def test_out_of_range_parameters_are_rejected_at_creation(served):
    url, project, _ = served
    with pytest.raises(Exception, match="seed|greater than or equal"):
        _run("posttrain-pipeline/pipeline", timeout=0, config_path=str(project / "smoke.yaml"), seed=-1)


def test_a_served_run_reads_no_config_outside_the_allowed_folders_and_echoes_none(served, tmp_path):
    secret = tmp_path / "secret.yaml"
    secret.write_text("token: hunter2-canary\n")
    for path in (str(secret), "../../etc/passwd"):
        refused = _run("posttrain-pipeline/pipeline", timeout=300, config_path=path)
        message = refused.state.message or ""
        assert refused.state.is_failed() and "outside the folders this server reads configs from" in message
        assert "hunter2-canary" not in message and "root:" not in message
    refused = _run("posttrain-promote/promote", timeout=300, version="1", config_path=str(secret))
    assert refused.state.is_failed() and "hunter2-canary" not in (refused.state.message or "")


def test_resume_of_a_failed_deployment_run_is_picked_up_by_the_runner(served, capsys):
    from prefect.client.orchestration import get_client

    from posttrain import cli

    url, project, home = served
    cfg = yaml.safe_load((project / "smoke.yaml").read_text())
    strict = project / "strict.yaml"
    cfg["stages"]["mode_fusion_sft"]["gate"] = {"targets": [{"metric": "math/format", "min": 1.01}], "regression": []}
    strict.write_text(yaml.safe_dump(cfg))
    failed = _run("posttrain-pipeline/pipeline", config_path=str(strict))
    assert failed.state.is_failed() and "gate of mode_fusion_sft failed" in (failed.state.message or "")

    cfg["stages"]["mode_fusion_sft"]["gate"] = {"targets": [], "regression": []}  # fixed: the retry re-reads it
    strict.write_text(yaml.safe_dump(cfg))
    assert cli.main(["resume", str(failed.id), "--config", str(strict)]) == 0
    out = capsys.readouterr().out
    assert "AwaitingRetry" in out and "will pick it up" in out

    deadline = time.monotonic() + 900
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            fr = client.read_flow_run(failed.id)
            if fr.state.is_final() and fr.run_count >= 2:
                break
            time.sleep(2)
    assert fr.state.is_completed(), (fr.state.message, (home / "serve.log").read_text()[-3000:])
    report = json.loads((project / "runs" / str(failed.id) / "report.json").read_text())
    stages = {s["name"]: s for s in report["stages"]}
    assert all(stages[n]["cached"] for n in ("cold_start_sft", "reasoning_rl", "rejection_sampling"))
