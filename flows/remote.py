"""A stage run on a Prefect work pool (`stages.<name>.run_on: {work_pool: ...}`).

The chain's cached stage task dispatches the stage as a flow run of the `posttrain-stage`
deployment served on that pool (`run_deployment`) and waits for it; a worker started with
`prefect worker start --pool NAME`, on this machine or another, runs it in a process of its own.
The deployment is registered on first use, with the project directory as its code location: the
worker's machine must see the project at the same path (a shared filesystem), which is also where
the stage's checkpoints, data and its result (`stage_result.json` in the stage's work dir) pass.

Caching is the chain's: the stage task's cache key ignores where a stage runs, so a Retry reuses a
stage finished on any worker, and moving a stage to another pool reuses its cache. A flow killed
while a remote stage runs leaves `dispatch.json` in the stage's work dir; on resume the same inputs
adopt that flow run (still running, or finished) instead of dispatching the stage again, and with it
the MLflow run its dispatch opened (`trained_in` in dispatch.json): resume leaves that run open, and
the chain closes it with the stage instead of opening a second one.
"""
from __future__ import annotations

import json
import os
import socket
import time
import uuid
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from flows import PROJECT_ROOT
from posttrain.config.pipeline import PipelineConfig
from posttrain.config.loading import validate_config
from posttrain.schema import StageInputs, StageResult
from posttrain.config.trainers import WorkPoolPlacement

STAGE_FLOW = "posttrain-stage"
DISPATCH_FILE = "dispatch.json"   # the flow run this stage waits on, keyed by the stage's cache key
RESULT_FILE = "stage_result.json"
EXECUTOR_FILE = "executor.json"   # which process, on which machine, ran the stage
POLL_S = 2.0


class RemoteStageFailed(RuntimeError):
    def __init__(self, message: str, trained_in: str | None = None):
        super().__init__(message)
        self.trained_in = trained_in   # the MLflow run the remote stage logged to


@flow(name=STAGE_FLOW, log_prints=False)
def stage_flow(name: str, config: dict, inputs: dict) -> dict:
    """Run one stage of the chain here (on a worker of the pool) and leave its result beside its
    checkpoint for the chain to read."""
    from flows.tasks import execute_stage

    # This machine checks what it runs (vLLM, DeepSpeed installed here), not what other machines run.
    elsewhere = {("stages", other) for other in config.get("stages", {}) if other != name} | {("evaluation",)}
    cfg, stage_inputs = validate_config(config, elsewhere=elsewhere), StageInputs.model_validate(inputs)
    work = Path(stage_inputs.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    run_id = str(flow_run.get_id())
    executor = {"pid": os.getpid(), "ppid": os.getppid(), "host": socket.gethostname(), "cwd": os.getcwd(),
                "prefect_home": os.environ.get("PREFECT_HOME"), "flow_run": run_id}
    _write_json(work / EXECUTOR_FILE, executor)
    get_run_logger().info(f"{name}: running on {executor['host']} (pid {executor['pid']})")
    result = execute_stage(name, cfg, stage_inputs)
    _write_json(work / RESULT_FILE, {"flow_run": run_id, "result": result.model_dump(mode="json")})
    return {"executor": executor}


def dispatch(name: str, cfg: PipelineConfig, inputs: StageInputs, placement: WorkPoolPlacement,
             key: str) -> StageResult:
    """Run the stage on `placement.work_pool` and return its result; adopt a flow run an interrupted
    attempt dispatched with the same inputs instead of starting a second one."""
    from prefect.deployments import run_deployment

    log = get_run_logger()
    work = Path(inputs.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    record = _read_json(work / DISPATCH_FILE) or {}
    attempts = record.get("attempts", 0) if record.get("key") == key else 0
    run_id = record.get("flow_run") if record.get("key") == key else None
    state = _state(run_id) if run_id else None
    tracking = inputs.tracking.run_id if inputs.tracking else None
    if _adoptable(state):
        tracking = record.get("trained_in", tracking)   # the dispatching attempt's MLflow run
        log.info(f"{name}: adopting flow run {run_id} on work pool {record.get('work_pool')} "
                 f"({state.name}) left by an interrupted run with the same inputs")
    else:
        if run_id:
            attempts += 1   # that run failed or was cancelled: a new one, under a new idempotency key
        deployment = ensure_deployment(placement.work_pool)
        # The idempotency key makes a dispatch that died before writing dispatch.json find its run again.
        run = run_deployment(deployment, parameters={"name": name, "config": cfg.model_dump(mode="json"),
                                                     "inputs": inputs.model_dump(mode="json")},
                             job_variables=placement.job_variables or None, timeout=0,
                             idempotency_key=f"{key}:{attempts}", flow_run_name=f"{name}-{key[6:14]}")
        run_id = str(run.id)
        _write_json(work / DISPATCH_FILE, {"key": key, "flow_run": run_id, "work_pool": placement.work_pool,
                                           "attempts": attempts, "trained_in": tracking})
        log.info(f"{name}: dispatched as flow run {run_id} to work pool {placement.work_pool}")
    state = _wait(name, run_id, placement)
    if not state.is_completed():
        raise RemoteStageFailed(f"stage {name} on work pool {placement.work_pool}: flow run {run_id} ended "
                                f"{state.name}: {state.message or 'no message'} (see its logs in the Prefect UI)",
                                trained_in=tracking)
    written = _read_json(work / RESULT_FILE)
    if not written or written.get("flow_run") != run_id:
        raise RemoteStageFailed(
            f"stage {name}: flow run {run_id} completed but its result is not in {work / RESULT_FILE}: does the "
            f"worker of pool {placement.work_pool} see the project directory {PROJECT_ROOT} at the same path?",
            trained_in=tracking)
    return StageResult.model_validate(written["result"])


def check_work_pools(cfg: PipelineConfig, stages: list[str]) -> None:
    """Every work pool the selected stages are placed on exists: checked before any work starts."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    placed = {name: cfg.stage(name).run_on for name in stages if getattr(cfg.stage(name), "run_on", None)}
    if not placed:
        return
    with get_client(sync_client=True) as client:
        for name, placement in placed.items():
            try:
                client.read_work_pool(placement.work_pool)
            except ObjectNotFound:
                pool = placement.work_pool
                raise RemoteStageFailed(
                    f"stages.{name}.run_on.work_pool: work pool {pool!r} does not exist on this Prefect server; "
                    f"create it and start a worker: prefect work-pool create {pool} --type process && "
                    f"prefect worker start --pool {pool}") from None


def ensure_deployment(work_pool: str) -> str:
    """`posttrain-stage/<pool>`, registered (or updated) with this project directory as its code."""
    source = stage_flow.from_source(source=str(PROJECT_ROOT), entrypoint="flows/remote.py:stage_flow")
    source.deploy(name=work_pool, work_pool_name=work_pool, build=False, push=False, print_next_steps=False,
                  ignore_warnings=True, description="One stage of the posttrain chain (dispatched by the pipeline)")
    return f"{STAGE_FLOW}/{work_pool}"


def _state(run_id: str):
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            return client.read_flow_run(uuid.UUID(run_id)).state
        except ObjectNotFound:
            return None


def _adoptable(state) -> bool:
    """A dispatched stage run that a resumed chain waits on again: still going, or completed."""
    return state is not None and not (state.is_final() and not state.is_completed())


def adoptable_stages(run_dir: Path) -> set[str]:
    """Stages of a run folder dispatched to a work pool whose flow run a resume would adopt: their
    MLflow runs are not abandoned (the worker's stage still logs to them, or has finished in them)."""
    found = set()
    for record_file in run_dir.glob(f"*/{DISPATCH_FILE}"):
        record = _read_json(record_file) or {}
        if record.get("flow_run") and _adoptable(_state(record["flow_run"])):
            found.add(record_file.parent.name)
    return found


def _wait(name: str, run_id: str, placement: WorkPoolPlacement):
    log = get_run_logger()
    started = last_note = time.monotonic()
    while True:
        state = _state(run_id)
        if state is None:
            raise RemoteStageFailed(f"stage {name}: flow run {run_id} vanished from the Prefect server")
        if state.is_final():
            return state
        waited = time.monotonic() - started
        if waited > placement.timeout_s:
            raise RemoteStageFailed(f"stage {name}: flow run {run_id} on work pool {placement.work_pool} not "
                                    f"finished after run_on.timeout_s={placement.timeout_s:g} s ({state.name})")
        if time.monotonic() - last_note > 60:
            hint = " (is a worker polling the pool?)" if state.is_scheduled() or state.is_pending() else ""
            log.info(f"{name}: flow run {run_id} {state.name} after {waited:.0f} s{hint}")
            last_note = time.monotonic()
        time.sleep(POLL_S)


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
