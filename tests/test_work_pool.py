"""A stage on a Prefect work pool, end to end: a real `prefect server start`, a `process` work pool
and a worker in a working directory of its own with its own PREFECT_HOME (sharing only the project
directory, as a worker on another machine would through a shared filesystem), and the smoke
pipeline with cold-start SFT dispatched to that pool.

The flow is killed while the remote stage runs; `posttrain resume` adopts the remote flow run
instead of dispatching the stage again; a failure injected in the next stage fails the resumed run;
a second resume (what the UI's Retry does) reuses the stage finished on the worker. One flow run of
the stage deployment exists at the end, the stage recorded the worker's process as its runner, and
its one MLflow training run is the one its dispatch opened (FINISHED, with the worker's live curves).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, write_smoke_config
from posttrain.config.loading import load_config
from posttrain.registry.model_registry import Registry
from test_deployments import _stop
from test_fault_tolerance import _entries, _kill, _report, _tail, _wait_for, prefect_server  # noqa: F401

pytestmark = [pytest.mark.timeout(1200), pytest.mark.slow]

POOL = "posttrain-test-pool"
STAGE = "cold_start_sft"
PAUSE_S = 20  # the remote stage sleeps this long after its work: the flow is killed inside it


def _cli(*args: str, url: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_API_URL": url}
    return subprocess.run([sys.executable, "-m", "prefect", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def worker(prefect_server, tmp_path):
    """(pid, PREFECT_HOME) of a `prefect worker start --pool POOL` in its own directory."""
    url, _ = prefect_server
    made = _cli("work-pool", "create", POOL, "--type", "process", "--overwrite", url=url)
    assert made.returncode == 0, made.stdout + made.stderr
    place = tmp_path / "worker"
    home = place / "prefect-home"
    home.mkdir(parents=True)
    env = {**os.environ, "PREFECT_API_URL": url, "PREFECT_HOME": str(home), "PYTHONUNBUFFERED": "1",
           "PREFECT_WORKER_QUERY_SECONDS": "2"}
    for name in ("POSTTRAIN_FAIL_STAGE", "POSTTRAIN_PAUSE_IN_STAGE"):
        env.pop(name, None)
    log = place / "worker.log"
    proc = subprocess.Popen([sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL],
                            cwd=place, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        yield proc, home, log
    finally:
        _stop(proc)


def _launch(project: Path, url: str, home: Path, log: Path, *command: str, fail: str | None = None):
    env = {**os.environ, "PREFECT_API_URL": url, "PREFECT_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    env.pop("POSTTRAIN_PAUSE_IN_STAGE", None)
    env.pop("POSTTRAIN_FAIL_STAGE", None)
    if fail:
        env["POSTTRAIN_FAIL_STAGE"] = fail
    return subprocess.Popen([sys.executable, "-m", "posttrain.cli", *command], cwd=ROOT, env=env,
                            start_new_session=True, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def _stage_runs(url: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(f"posttrain-stage/{POOL}")
        return [r for r in client.read_flow_runs() if r.deployment_id == deployment.id]


def test_stage_on_a_work_pool_is_adopted_on_resume_and_reused_on_retry(prefect_server, worker, tmp_path):
    url, server_home = prefect_server
    worker_proc, worker_home, worker_log = worker
    project = tmp_path / "project"
    project.mkdir()
    config = write_smoke_config(project)
    cfg = yaml.safe_load(config.read_text())
    cfg["stages"][STAGE]["run_on"] = {"work_pool": POOL, "timeout_s": 900,
                                      "job_variables": {"env": {"POSTTRAIN_PAUSE_IN_STAGE": f"{STAGE}:{PAUSE_S}"}}}
    config.write_text(yaml.safe_dump(cfg))
    run_command = ("run", "--config", str(config), "--stages", STAGE, "reasoning_rl")

    # 1. The flow dispatches the stage and is killed while the worker runs it.
    log = tmp_path / "run.log"
    proc = _launch(project, url, server_home, log, *run_command)
    executor_file = _wait_for(lambda: next((project / "runs").glob(f"*/{STAGE}/executor.json"), None), proc, log,
                              "the stage to start on the worker", timeout=600, poll=0.2)
    _kill(proc)
    run_dir = executor_file.parent.parent
    run_id = run_dir.name
    executor = json.loads(executor_file.read_text())
    assert executor["ppid"] == worker_proc.pid, (executor, worker_proc.pid)  # a child of the worker
    assert executor["pid"] != proc.pid and executor["prefect_home"] == str(worker_home)
    dispatched = json.loads((executor_file.parent / "dispatch.json").read_text())
    assert dispatched["work_pool"] == POOL and dispatched["flow_run"] == executor["flow_run"]

    # 2. Resume adopts the running remote flow run; the next stage's injected failure fails the run.
    log2 = tmp_path / "resume1.log"
    resumed = _launch(project, url, server_home, log2, "resume", run_id, "--config", str(config), fail="reasoning_rl")
    assert resumed.wait(600) != 0, _tail(log2)
    assert "adopting flow run " + executor["flow_run"] in log2.read_text(), _tail(log2)
    assert len(_stage_runs(url)) == 1
    entries = _entries(_report(run_dir))
    assert entries[STAGE]["status"] == "passed", entries
    assert "injected failure in stage reasoning_rl" in log2.read_text()
    # The stage trained in the MLflow run its dispatch opened: resume neither killed it nor opened a
    # second one for it; that run holds the curves the worker logged live, and the version points to it.
    registry = Registry.for_config(load_config(config))
    runs = registry.client.search_runs([registry._experiment()],
                                       filter_string=f"tags.flow_run = '{run_id}' and tags.stage = '{STAGE}'")
    assert [r.info.status for r in runs] == ["FINISHED"], [(r.info.run_id, r.info.status) for r in runs]
    assert runs[0].info.run_id == dispatched["trained_in"] and runs[0].data.metrics, runs[0].data
    version = registry.client.search_model_versions(f"name = '{registry.model_name}'")
    assert [v.run_id for v in version if v.tags.get("stage") == STAGE] == [dispatched["trained_in"]]
    assert "marked KILLED" not in log2.read_text(), _tail(log2)

    # 3. Retry: the stage finished on the worker is reused; nothing is dispatched again.
    log3 = tmp_path / "resume2.log"
    again = _launch(project, url, server_home, log3, "resume", run_id, "--config", str(config))
    assert again.wait(600) == 0, _tail(log3)
    entries = _entries(_report(run_dir))
    assert entries[STAGE]["cached"] is True and entries["reasoning_rl"]["status"] == "passed", entries
    runs = _stage_runs(url)
    assert len(runs) == 1 and runs[0].state.is_completed(), [(r.name, r.state.name) for r in runs]
    assert json.loads(executor_file.read_text())["pid"] == executor["pid"]  # never run a second time


def test_a_missing_work_pool_fails_before_any_work_with_the_command_to_create_it(prefect_server, tmp_path):
    url, server_home = prefect_server
    config = write_smoke_config(tmp_path)
    cfg = yaml.safe_load(config.read_text())
    cfg["stages"][STAGE]["run_on"] = {"work_pool": "no-such-pool"}
    config.write_text(yaml.safe_dump(cfg))
    log = tmp_path / "run.log"
    proc = _launch(tmp_path, url, server_home, log, "run", "--config", str(config), "--stages", STAGE)
    assert proc.wait(600) != 0
    text = log.read_text()
    assert "stages.cold_start_sft.run_on.work_pool: work pool 'no-such-pool' does not exist" in text, _tail(log)
    assert "prefect worker start --pool no-such-pool" in text
    assert "evaluating base" not in text and not list((tmp_path / "runs").glob(f"*/{STAGE}")), _tail(log)
