"""What `posttrain run` and `posttrain resume` do on the Prefect side: run the pipeline flow in this
process, and resume a flow run that failed, crashed or was killed, each under a Prefect API (the
configured one, else a temporary server owned by this process: flows/server.py).

posttrain/cli.py parses the arguments and prints the outcome; nothing here parses arguments.
Progress that must show before a long flow run starts goes through ``say`` (the CLI passes print).
A refusal is a :class:`CommandError`, one line the CLI prints as ``error: ...``.
"""
from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows import PROJECT_ROOT

# Flows `resume` can execute in this process, by flow name (module:function, importable from the project).
FLOW_ENTRYPOINTS = {
    "posttrain-pipeline": "flows.pipeline:pipeline",
    "posttrain-promote": "flows.serve:promote_flow",
    "posttrain-rollback": "flows.serve:rollback_flow",
    "posttrain-evaluate": "flows.serve:evaluate_flow",
}
RESUMABLE = ("FAILED", "CRASHED", "CANCELLED")
SERVED_WITHIN_S = 60  # a deployment polled this recently has a live runner (`serve`) or worker


class CommandError(Exception):
    """A clear one-line refusal of `run` or `resume` (the CLI prints it as `error: ...`, exit code 2)."""


@dataclass
class FlowOutcome:
    """How a flow run this process executed ended."""

    flow_run: str
    state: str                          # the final state's type: COMPLETED, FAILED, CRASHED, ...
    message: str | None                 # the final state's message
    result: Any = None                  # the flow's return value, when it completed
    error: BaseException | None = None  # the flow's own error, when it did not

    @property
    def completed(self) -> bool:
        return self.state == "COMPLETED"


def _outcome(state, flow_run) -> FlowOutcome:
    """Read the final state while the API that holds its result is still up."""
    outcome = FlowOutcome(flow_run=str(flow_run), state=state.type.value, message=state.message)
    if outcome.completed:
        outcome.result = state.result()
        return outcome
    try:
        state.result()  # raises the flow's own error
    except Exception as exc:  # said once, plainly, by the caller
        outcome.error = exc
    return outcome


def run_pipeline(config_path: str, *, stages: list[str] | None = None, seed: int | None = None,
                 force: bool = False, on_gate_failure: str = "stop") -> FlowOutcome:
    """Run the pipeline flow (flows.pipeline.pipeline) in this process."""
    from flows.server import prefect_api

    with prefect_api():  # without PREFECT_API_URL, a server that dies with this process
        from flows.pipeline import pipeline

        state = pipeline(config_path=config_path, stages=stages, seed=seed, force=force,
                         on_gate_failure=on_gate_failure, return_state=True)
        return _outcome(state, state.state_details.flow_run_id)


def _deployment_served(client, deployment_id) -> tuple[bool, str]:
    from datetime import datetime, timezone

    from prefect.exceptions import ObjectNotFound

    try:
        dep = client.read_deployment(deployment_id)
    except ObjectNotFound:
        return False, "its deployment no longer exists"
    polled = dep.last_polled
    status = getattr(dep.status, "value", dep.status)
    fresh = polled is not None and (datetime.now(timezone.utc) - polled).total_seconds() < SERVED_WITHIN_S
    return bool(fresh and status == "READY"), f"deployment {dep.name!r}"


def _run_dir(run, cfg=None) -> Path:
    """The run folder of a pipeline flow run: <runs of its config_path parameter>/<flow run id>."""
    cfg = cfg or _config(run)
    return cfg.path(cfg.paths.runs) / str(run.id)


def _config(run):
    """The config a pipeline flow run was started with (its config_path parameter)."""
    from posttrain.config.pipeline import ConfigError
    from posttrain.config.loading import load_config

    config_path = (run.parameters or {}).get("config_path")
    if not config_path:
        raise CommandError(f"flow run {run.id} ({run.name}) has no config_path parameter: no run folder, hence no "
                           "process record to tell whether its process is gone")
    path = Path(config_path) if Path(config_path).is_absolute() else PROJECT_ROOT / config_path
    try:
        cfg = load_config(path)
    except (ConfigError, OSError) as exc:
        raise CommandError(f"cannot locate the run folder of flow run {run.id}: its config {path}: {exc}") from None
    return cfg


def _crash_if_process_gone(client, run, say: Callable[[str], None]) -> None:
    """kill -9 of the process that runs a flow (the OOM killer, a lost machine) leaves its flow run
    RUNNING on the API forever: nothing is left to report the end.  Set such a run Crashed, saying why,
    when the process its attempt recorded (posttrain.orchestration.liveness) is provably gone, so that it resumes
    like any crashed run; otherwise raise a CommandError that says what is known."""
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterFlowRunId, TaskRunFilterState, \
        TaskRunFilterStateType
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    from posttrain.orchestration import liveness

    what = f"flow run {run.id} ({run.name}) is {run.state.type.value}"
    if run.state.is_pending():
        raise CommandError(f"{what}: the process that set it has not started the flow, so no process record names "
                           "it and whether it is gone cannot be told; if it is, set the run Crashed in the UI and "
                           "resume")
    cfg = _config(run)
    run_dir = _run_dir(run, cfg)
    where = run_dir / liveness.RECORD_FILE
    record = liveness.read_record(run_dir)
    if record is None:
        raise CommandError(f"{what} and left no process record ({where} is missing or unreadable): cannot tell "
                           "whether its process is gone")
    if record.attempt != str(run.state.id):  # the record of an earlier attempt says nothing about this one
        raise CommandError(f"{what}, but {where} is the record of an earlier attempt (state {record.attempt}, not "
                           f"{run.state.id}): cannot tell whether the current attempt's process is gone")
    process = record.process
    alive = liveness.is_alive(process)
    if alive is None:
        raise CommandError(f"{what} in {process.describe()}, which cannot be checked from this host: check it there")
    if alive:
        raise CommandError(f"{what} and its process is alive: {process.describe()}, running it since "
                           f"{record.started}; let it finish, or stop it (kill {process.pid}) and resume again")
    message = (f"{process.describe()}, which ran this attempt since {record.started}, is gone without reporting "
               "an end (killed?); marked Crashed by posttrain resume")
    client.set_flow_run_state(run.id, Crashed(message=message), force=True)
    # Its task runs (the stage it was in) were left RUNNING too: the UI would show them in progress forever.
    left = client.read_task_runs(task_run_filter=TaskRunFilter(
        flow_run_id=TaskRunFilterFlowRunId(any_=[run.id]),
        # (`name` given: Prefect 3.7 declares it without a default)
        state=TaskRunFilterState(type=TaskRunFilterStateType(any_=[StateType.RUNNING, StateType.PENDING]), name=None)))
    for task_run in left:
        client.set_task_run_state(task_run.id, Crashed(message=message), force=True)
    with contextlib.suppress(Exception):  # the registry's record of the killed stage; resuming matters more
        from flows.remote import adoptable_stages
        from posttrain.registry.model_registry import Registry

        closed = Registry.for_config(cfg).end_abandoned_training(str(run.id), keep=adoptable_stages(run_dir))
        if closed:
            say(f"flow run {run.id}: training run(s) {', '.join(closed)} it left RUNNING in the registry marked KILLED")
    say(f"flow run {run.id} ({run.name}): {message}")


def resume(flow_run: str, say: Callable[[str], None] = print) -> FlowOutcome | None:
    """What the UI's Retry button and `prefect flow-run retry` do: move the terminal (failed) run
    ``flow_run`` (an id, or a unique name) to AwaitingRetry; a served deployment's runner then picks
    it up (returns None), otherwise it runs here, under the same flow run id, reusing cached stages
    (returns how it ended).  A RUNNING run whose process was killed is first set Crashed
    (_crash_if_process_gone)."""
    from flows.server import prefect_api

    with prefect_api():  # without PREFECT_API_URL, a server that dies with this process
        return _resume(flow_run, say)


def _resume(flow_run: str, say: Callable[[str], None]) -> FlowOutcome | None:
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
    from prefect.client.schemas.responses import SetStateStatus
    from prefect.exceptions import ObjectNotFound
    from prefect.flow_engine import run_flow
    from prefect.states import AwaitingRetry
    from prefect.utilities.callables import get_call_parameters, parameters_to_args_kwargs

    with get_client(sync_client=True) as client:
        try:
            run = client.read_flow_run(UUID(flow_run))
        except ValueError:  # not a UUID: a flow run name
            runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[flow_run])),
                                         limit=10)
            if len(runs) != 1:
                raise CommandError(f"flow run {flow_run!r} " + ("not found" if not runs else
                                   "is ambiguous: " + ", ".join(str(r.id) for r in runs))) from None
            run = runs[0]
        except ObjectNotFound:
            raise CommandError(f"flow run {flow_run} not found on the Prefect API") from None
        state = run.state.type.value if run.state else "UNKNOWN"
        if state == "COMPLETED":
            raise CommandError(f"flow run {run.id} ({run.name}) already completed; nothing to resume "
                               "(start a new run: finished stages are reused from the cache)")
        if state in ("RUNNING", "PENDING"):  # refused unless its process is provably gone
            _crash_if_process_gone(client, run, say)
            state = "CRASHED"
        if state not in RESUMABLE:
            raise CommandError(f"flow run {run.id} ({run.name}) is {state}; only FAILED, CRASHED or CANCELLED runs "
                               "(or RUNNING ones whose process is gone) can be resumed")
        flow_name = client.read_flow(run.flow_id).name
        served, where = (False, "")
        if run.deployment_id:
            served, where = _deployment_served(client, run.deployment_id)
        if not served and flow_name not in FLOW_ENTRYPOINTS:
            raise CommandError(f"flow run {run.id} is of flow {flow_name!r}, which this project cannot run "
                               f"(known: {', '.join(FLOW_ENTRYPOINTS)})")
        result = client.set_flow_run_state(run.id, AwaitingRetry(message="Resumed via posttrain resume"), force=True)
        if result.status == SetStateStatus.ABORT:
            raise CommandError(f"flow run {run.id} could not be resumed: {result.details.reason}")
        if served:
            say(f"flow run {run.id} ({run.name}) set to AwaitingRetry; the runner serving {where} will pick it up")
            return None
        module, _, attr = FLOW_ENTRYPOINTS[flow_name].partition(":")
        flow_obj = getattr(importlib.import_module(module), attr)
        run = client.read_flow_run(run.id)
        try:
            call_args, call_kwargs = parameters_to_args_kwargs(flow_obj.fn, run.parameters or {})
            parameters = get_call_parameters(flow_obj.fn, call_args, call_kwargs)
        except Exception as exc:
            raise CommandError(f"the parameters of flow run {run.id} no longer fit {flow_name}: {exc}") from None
        say(f"resuming flow run {run.id} ({run.name}) in this process"
            + (f" ({where} has no live runner)" if run.deployment_id else ""))
    return _outcome(run_flow(flow=flow_obj, flow_run=run, parameters=parameters, return_type="state"), run.id)
