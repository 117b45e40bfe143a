"""The pipeline flow: the post-training chain with a gate after every stage.

    prepare data -> evaluate base -> for each stage: train (or reuse) -> evaluate -> judge -> register
    -> record -> stop or go on -> report card

Each step is a method of flows.chain.ChainRun; the cached tasks and their keys are in flows/tasks.py.
"""
from __future__ import annotations

import time
from typing import Annotated, Literal

from prefect import flow
from prefect.context import FlowRunContext
from prefect.runtime import flow_run
from pydantic import Field

from flows import PROJECT_ROOT
from flows.chain import ChainRun, GateFailed, gate_failure
from posttrain.config.pipeline import STAGES, StageName
from posttrain.config.loading import load_config, served_config_path
from posttrain.orchestration.liveness import running_process


# log_prints stays off: dill captures dis output by swapping sys.stdout, which patched print() bypasses.
@flow(name="posttrain-pipeline", log_prints=False)
def pipeline(
    config_path: Annotated[str, Field(description="Pipeline YAML, relative to the project or absolute")] = "configs/default.yaml",
    stages: Annotated[list[StageName] | None, Field(description="Stages to run (default: all, in order)")] = None,
    seed: Annotated[int | None, Field(ge=0, description="Overrides the config's seed")] = None,
    force: Annotated[bool, Field(description="Recompute stages even when a cached result exists")] = False,
    on_gate_failure: Annotated[Literal["stop", "continue"], Field(
        description="stop: a failed gate ends the run. continue: record it (checkpoint rejected, never "
                    "promoted), go on with the chain for diagnosis, and fail the run at the end")] = "stop",
) -> dict:
    """Run the post-training chain with a gate after every stage.

    config_path: pipeline YAML. stages: which stages to run (default all; skipped ones hand their
    parent on). seed: overrides the config's seed. force: recompute even cached stages.
    """
    started = time.time()
    cfg = load_config(served_config_path(config_path, PROJECT_ROOT), overrides={"seed": seed} if seed is not None else None)
    run_id = str(flow_run.get_id() or f"local-{int(started)}")
    run_dir = cfg.path(cfg.paths.runs) / run_id
    run = ChainRun(cfg, run_id, run_dir, str(config_path), set(stages or STAGES), force, started)
    # A kill -9 leaves the flow run RUNNING on the API forever: recording which process runs this
    # attempt lets `posttrain resume` and `posttrain status` tell a dead run from a live one.
    with running_process(run_dir, attempt=_running_state_id()):
        return run_chain(run, on_gate_failure)


def run_chain(run: ChainRun, on_gate_failure: str) -> dict:
    run.prepare_data()
    parent = run.evaluate_base()
    failed_gates = []
    for name in STAGES:
        if name not in run.selected:
            run.skip(name)
            continue
        result, cached = run.train(name, parent)
        evaluation = run.evaluate(name, result, parent)
        verdict = run.judge(name, result, evaluation, parent)
        version = run.register(name, result, verdict, cached, parent)
        parent = run.record(name, result, cached, evaluation, verdict, version)
        if not verdict.passed:
            failed_gates.append(gate_failure(name, verdict))
            if on_gate_failure == "stop":
                raise GateFailed(failed_gates[-1])
            run.log.warning(f"{failed_gates[-1]} (continuing: on_gate_failure=continue)")
    return run.finish(failed_gates)


def _running_state_id() -> str | None:
    """Id of the RUNNING state this process holds (the engine keeps the API's id on it)."""
    context = FlowRunContext.get()
    state = context.flow_run.state if context and context.flow_run else None
    return str(state.id) if state is not None and state.is_running() else None
