"""The pipeline's two cached Prefect tasks, a stage and an evaluation, and what keys their caches.

A stage result is cached on what determines it (stage name, stage code version, stage config,
parent checkpoint digest, the content hashes of the data it reads, model settings, seed, reward
verifier and training library versions) and never on the run id, so a retried run or a new run
with the same inputs reuses finished stages. Evaluation is cached on the checkpoint and the suites:
changing an evaluation source reruns evaluation and gates only.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
import subprocess
import time
from pathlib import Path

from prefect import get_run_logger, task

from flows import PROJECT_ROOT
from posttrain.orchestration.attempts import finish_attempt, start_attempt
from posttrain.registry.checkpoint import is_intact
from posttrain.config.pipeline import PipelineConfig
from posttrain.schema import CheckpointRef, DatasetRef, EvalResult, StageInputs, StageResult
from posttrain.training.launcher import launch
from posttrain.config.trainers import LauncherConfig, cache_relevant

FAIL_STAGE_ENV = "POSTTRAIN_FAIL_STAGE"  # fault injection for tests: fail this stage before it runs
# Test-only, "<stage>:<seconds>": sleep after the stage's work, before its result is returned (and so
# persisted and registered), so a kill -9 can be aimed inside a stage that takes a second on the smoke
# config (tests/test_fault_tolerance.py).
PAUSE_STAGE_ENV = "POSTTRAIN_PAUSE_IN_STAGE"


def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def stage_cache_key(context, parameters) -> str:
    """What determines a stage's result. The reward verifiers' versions and the training libraries'
    are in it, so fixing a reward reruns the stages trained with it; uncommitted changes to the code
    key the cache on the diff, so a dirty tree neither reuses nor is reused by a clean one."""
    from posttrain.agents.training import environment_versions_in
    from posttrain.rewards import VERIFIER_VERSIONS  # imported when used: serving the flows needs no torch

    name, cfg, inputs = parameters["name"], parameters["config"], parameters["inputs"]
    module = importlib.import_module(f"stages.{name}")
    return "stage-" + _digest(name, module.STAGE_VERSION, cache_relevant(cfg.stage(name)),
                              inputs.parent.digest, inputs.student.digest if inputs.student else None,
                              sorted(d.md5 for d in inputs.datasets), {k: d.md5 for k, d in inputs.data.items()},
                              inputs.model.model_dump(mode="json"), inputs.seed, VERIFIER_VERSIONS,
                              _library_versions(), code_state()["dirty"],
                              *_environments(environment_versions_in(d.path for d in inputs.data.values())))


def _environments(versions: dict) -> list:
    """The environments' versions as a key part, absent when no row uses one (old keys stay valid)."""
    return [versions] if versions else []


@functools.cache
def _library_versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("trl", "transformers", "torch")}


@functools.cache
def code_state() -> dict[str, str | None]:
    """The commit this code runs at and, when stages/, posttrain/ or flows/ differ from it (edits
    or new files), a hash of those differences (else None)."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                                  timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    code = ("stages", "posttrain", "flows")
    revision = git("rev-parse", "HEAD").strip() or "unknown"
    diff = git("diff", "HEAD", "--", *code)
    untracked = git("ls-files", "--others", "--exclude-standard", "--", *code).split()
    for path in untracked:
        diff += path + (PROJECT_ROOT / path).read_text(errors="replace") if (PROJECT_ROOT / path).is_file() else ""
    return {"revision": revision, "dirty": hashlib.sha256(diff.encode()).hexdigest()[:16] if diff else None}


def eval_cache_key(context, parameters) -> str:
    from posttrain.agents.training import environment_versions_in
    from posttrain.evaluation.suites import EVAL_VERSION
    from posttrain.rewards import VERIFIER_VERSIONS

    cfg: PipelineConfig = parameters["config"]
    # The generation engine keys it (gates pair a checkpoint's items with its parent's, engine for
    # engine); how vLLM sits on the GPUs does not.
    return "eval-" + _digest(EVAL_VERSION, VERIFIER_VERSIONS, parameters["checkpoint"].digest, cache_relevant(cfg.evaluation),
                             cfg.budget_curve_for(parameters["label"]),
                             [s.model_dump(mode="json", exclude={"sources"}) for s in cfg.data.suites()],
                             {k: d.md5 for k, d in parameters["suites"].items()}, cfg.base.settings().model_dump(mode="json"),
                             *([rm.digest] if (rm := parameters.get("reward_model")) is not None else []),
                             *_environments(environment_versions_in(d.path for d in parameters["suites"].values())))


@task(name="stage", cache_key_fn=stage_cache_key, persist_result=True, result_serializer="json",
      task_run_name="{name}")
def run_stage(name: str, config: PipelineConfig, inputs: StageInputs) -> StageResult:
    if os.environ.get(FAIL_STAGE_ENV) == name:
        raise RuntimeError(f"injected failure in stage {name} ({FAIL_STAGE_ENV} is set)")
    run_on = getattr(config.stage(name), "run_on", None)
    if run_on is not None:
        from flows.remote import dispatch

        key = stage_cache_key(None, {"name": name, "config": config, "inputs": inputs})
        return dispatch(name, config, inputs, run_on, key)
    return execute_stage(name, config, inputs)


def execute_stage(name: str, config: PipelineConfig, inputs: StageInputs) -> StageResult:
    """The stage's work on this machine: adopt the in-stage checkpoints an interrupted attempt with
    the same inputs left, launch it (in-process or as a multi-process job), mark it finished."""
    work_dir = Path(inputs.work_dir)
    key = stage_cache_key(None, {"name": name, "config": config, "inputs": inputs})
    for adopted in start_attempt(work_dir, key):  # in-stage checkpoints of a killed run (posttrain/orchestration/attempts.py)
        get_run_logger().info(f"{name}: continuing from {adopted.name} of an interrupted run with the same inputs")
    stage_config = config.stage(name)
    result = launch(name, stage_config, inputs, getattr(stage_config, "launcher", LauncherConfig()))
    pause_stage, _, seconds = os.environ.get(PAUSE_STAGE_ENV, "").partition(":")
    if pause_stage == name:
        time.sleep(float(seconds))
    finish_attempt(work_dir)
    return result.model_copy(update={"trained_in": inputs.tracking.run_id if inputs.tracking else None})


@task(name="evaluate", cache_key_fn=eval_cache_key, persist_result=True, result_serializer="json",
      task_run_name="evaluate-{label}")
def evaluate_checkpoint(checkpoint: CheckpointRef, config: PipelineConfig, suites: dict[str, DatasetRef],
                        label: str, reward_model: CheckpointRef | None = None) -> EvalResult:
    from posttrain.evaluation.suites import evaluate

    return evaluate(checkpoint, config, suites=suites, desc=f"evaluating {label}",
                    budget_curve=config.budget_curve_for(label),
                    reward_model=reward_model.path if reward_model is not None else None)


def call_cached(task_fn, refresh: bool, storage: Path, **kwargs):
    """Run a cached task; returns (result, was_cached). A cached checkpoint that is gone or altered
    is recomputed instead of being handed on as a dangling path."""
    state = task_fn.with_options(result_storage=storage, refresh_cache=refresh)(**kwargs, return_state=True)
    result = state.result()
    cached = state.name == "Cached"
    if cached and isinstance(result, StageResult) and not is_intact(result.checkpoint):
        get_run_logger().warning(f"cached checkpoint {result.checkpoint.path} is missing or altered: recomputing")
        state = task_fn.with_options(result_storage=storage, refresh_cache=True)(**kwargs, return_state=True)
        result, cached = state.result(), False
    return result, cached
