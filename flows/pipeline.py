"""The pipeline flow: stage -> evaluation -> gate -> registry, for each stage in order.

Stage results are persisted and cached on what determines them (stage name, stage code version,
stage config, parent checkpoint digest, the content hashes of the data it reads, model settings,
seed) and never on the run id, so a retried run or a new run with the same inputs reuses finished
stages. Evaluation is cached on the checkpoint and the suites: changing an evaluation source reruns
evaluation and gates only.
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
from typing import Annotated, Literal

from pydantic import Field

from posttrain.env import configure_offline

PROJECT_ROOT = Path(__file__).resolve().parent.parent
configure_offline(PROJECT_ROOT)

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402
from prefect.context import FlowRunContext  # noqa: E402
from prefect.runtime import flow_run  # noqa: E402

from posttrain.attempts import finish_attempt, start_attempt  # noqa: E402
from posttrain.checkpoint import is_intact  # noqa: E402
from posttrain.config import STAGES, PipelineConfig, StageName, config_hash, load_config, served_config_path  # noqa: E402
from posttrain.gates import carried_checks, judge  # noqa: E402
from posttrain.liveness import running_process  # noqa: E402
from posttrain.registry import Registry  # noqa: E402
from posttrain.report import write_report  # noqa: E402
from posttrain.prepared import prepare  # noqa: E402
from posttrain.schema import CheckpointRef, DatasetRef, EvalResult, StageInputs, StageResult  # noqa: E402

FAIL_STAGE_ENV = "POSTTRAIN_FAIL_STAGE"  # fault injection for tests: fail this stage before it runs
# Test-only, "<stage>:<seconds>": sleep after the stage's work, before its result is returned (and so
# persisted and registered), so a kill -9 can be aimed inside a stage that takes a second on the smoke
# config (tests/test_fault_tolerance.py).
PAUSE_STAGE_ENV = "POSTTRAIN_PAUSE_IN_STAGE"


class GateFailed(RuntimeError):
    pass


def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def stage_cache_key(context, parameters) -> str:
    """What determines a stage's result. The reward verifiers' versions and the training libraries'
    are in it, so fixing a reward reruns the stages trained with it; uncommitted changes to the code
    key the cache on the diff, so a dirty tree neither reuses nor is reused by a clean one."""
    from posttrain.rewards import VERIFIER_VERSIONS

    name, cfg, inputs = parameters["name"], parameters["config"], parameters["inputs"]
    module = importlib.import_module(f"stages.{name}")
    return "stage-" + _digest(name, module.STAGE_VERSION, cfg.stage(name).model_dump(mode="json"),
                              inputs.parent.digest, inputs.student.digest if inputs.student else None,
                              sorted(d.md5 for d in inputs.datasets), {k: d.md5 for k, d in inputs.data.items()},
                              inputs.model.model_dump(mode="json"), inputs.seed, VERIFIER_VERSIONS,
                              _library_versions(), code_state()["dirty"])


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
    cfg: PipelineConfig = parameters["config"]
    from posttrain.evaluation import EVAL_VERSION
    from posttrain.rewards import VERIFIER_VERSIONS

    return "eval-" + _digest(EVAL_VERSION, VERIFIER_VERSIONS, parameters["checkpoint"].digest, cfg.evaluation.model_dump(mode="json"),
                             [s.model_dump(mode="json", exclude={"sources"}) for s in cfg.data.suites()],
                             {k: d.md5 for k, d in parameters["suites"].items()}, cfg.base.settings().model_dump(mode="json"))


@task(name="stage", cache_key_fn=stage_cache_key, persist_result=True, result_serializer="json",
      task_run_name="{name}")
def run_stage(name: str, config: PipelineConfig, inputs: StageInputs) -> StageResult:
    if os.environ.get(FAIL_STAGE_ENV) == name:
        raise RuntimeError(f"injected failure in stage {name} ({FAIL_STAGE_ENV} is set)")
    work_dir = Path(inputs.work_dir)
    key = stage_cache_key(None, {"name": name, "config": config, "inputs": inputs})
    for adopted in start_attempt(work_dir, key):  # in-stage checkpoints of a killed run (posttrain/attempts.py)
        get_run_logger().info(f"{name}: continuing from {adopted.name} of an interrupted run with the same inputs")
    module = importlib.import_module(f"stages.{name}")
    result = module.run(config.stage(name), inputs)
    pause_stage, _, seconds = os.environ.get(PAUSE_STAGE_ENV, "").partition(":")
    if pause_stage == name:
        time.sleep(float(seconds))
    finish_attempt(work_dir)
    return result


@task(name="evaluate", cache_key_fn=eval_cache_key, persist_result=True, result_serializer="json",
      task_run_name="evaluate-{label}")
def evaluate_checkpoint(checkpoint: CheckpointRef, config: PipelineConfig, suites: dict[str, DatasetRef],
                        label: str) -> EvalResult:
    from posttrain.evaluation import evaluate

    return evaluate(checkpoint, config, suites=suites, desc=f"evaluating {label}")


def base_checkpoint(cfg: PipelineConfig, which: str = "teacher") -> CheckpointRef:
    """The starting checkpoint: the embedded world's base, or the configured model (HF id / path)."""
    from posttrain.checkpoint import directory_digest

    location = cfg.base.model if which == "teacher" else cfg.base.student
    if location == "embedded":
        from posttrain.world.build import base_checkpoint as embedded_base

        return embedded_base(cfg, which)
    local = Path(location) if Path(location).is_absolute() else cfg.path(location)
    if local.is_dir():
        return CheckpointRef(path=str(local), digest=directory_digest(local))
    return CheckpointRef(path=location, digest=f"hub:{location}")


def _code_isolation(cfg: PipelineConfig, data) -> str:
    """The code sandbox's mode when any row is a code task or a stage weighs the code reward;
    without OS isolation (and no opt-in) the run stops here, before any work."""
    code_rows = any(r.get("kind") == "code" for d in data.loaded.values() for r in d.rows)
    code_reward = any(getattr(getattr(cfg.stage(n), "rewards", None), "code", 0) for n in STAGES)
    if not (code_rows or code_reward):
        return "not used"
    from posttrain.rewards.code_sandbox import require_isolation, sandbox_info

    mode = require_isolation(cfg.sandbox.unsafe_allow_unisolated)
    get_run_logger().info(f"code sandbox: {sandbox_info()}")
    return mode if mode != "none" else "none (unsafe_allow_unisolated)"


def _call(task_fn, refresh: bool, storage: Path, **kwargs):
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


def _publish_gate(stage: str, verdict) -> None:
    create_table_artifact(
        key=f"gate-{stage.replace('_', '-')}",
        table=[{"check": c.name, "value": c.value, "threshold": c.threshold, "passed": c.passed, "detail": c.detail}
               for c in verdict.checks],
        description=f"Gate verdict for {stage}: {'passed' if verdict.passed else 'FAILED'}",
    )


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
    # A kill -9 leaves the flow run RUNNING on the API forever: recording which process runs this
    # attempt lets `posttrain resume` and `posttrain status` tell a dead run from a live one.
    with running_process(run_dir, attempt=_running_state_id()):
        return _run_chain(cfg, str(config_path), run_id, run_dir, set(stages or STAGES), force, on_gate_failure,
                          started)


def _running_state_id() -> str | None:
    """Id of the RUNNING state this process holds (the engine keeps the API's id on it)."""
    context = FlowRunContext.get()
    state = context.flow_run.state if context and context.flow_run else None
    return str(state.id) if state is not None and state.is_running() else None


def _run_chain(cfg: PipelineConfig, config_path: str, run_id: str, run_dir: Path, selected: set[str], force: bool,
               on_gate_failure: str, started: float) -> dict:
    logger = get_run_logger()
    storage = cfg.path(cfg.paths.runs) / "prefect-results"
    if "embedded" in (cfg.base.model, cfg.base.student):
        from posttrain.world.build import ensure_world

        ensure_world(cfg, log=logger.info)
    data = prepare(cfg, cfg.path(cfg.paths.runs) / "prepared", tuple(s for s in STAGES if s in selected))
    for note in (n for d in data.loaded.values() for n in d.notes):
        logger.info(note)
    sandbox = _code_isolation(cfg, data)

    registry = Registry(cfg.path(cfg.paths.registry), model_name=f"posttrain-{cfg.name}")
    code = code_state()
    if code["dirty"]:
        logger.warning(f"stages/, posttrain/ or flows/ have uncommitted changes (diff {code['dirty']}): recorded "
                       "in the lineage; the stage cache only matches runs of this exact diff")
    lineage = {"flow_run": run_id, "config_hash": config_hash(cfg), "code_revision": code["revision"],
               "code_dirty": code["dirty"] or "no", "sandbox": sandbox,
               "seed": str(cfg.seed)}
    report = {"run_id": run_id, "config": config_path, "wall_s": 0.0, "sandbox": sandbox, "stages": []}

    base = base_checkpoint(cfg, "teacher")
    base_eval, base_cached = _call(evaluate_checkpoint, force, storage, checkpoint=base, config=cfg, suites=data.suites,
                                   label="base")
    evals: dict[str, EvalResult] = {"base": base_eval}
    report["stages"].append({"name": "base", "status": "passed", "cached": base_cached, "wall_s": 0.0,
                             "checkpoint": base.model_dump(), "gate": None, "eval": base_eval.metrics,
                             "eval_items": base_eval.items})

    current, current_name, datasets, failed_gates = base, "base", [], []
    versions = {"base": None}
    for name in STAGES:
        stage_started = time.time()
        if name not in selected:
            report["stages"].append({"name": name, "status": "skipped", "cached": False, "wall_s": 0.0})
            continue
        inputs = StageInputs(
            work_dir=str(run_dir / name), data=data.for_stage(name), model=cfg.base.settings(), parent=current,
            probe=data.probe(cfg) if name == "reasoning_rl" else None, seed=cfg.seed, datasets=datasets,
            student=base_checkpoint(cfg, "student") if name == "distillation" else None,
            data_store=str(cfg.path(cfg.paths.data_store)), dvc_remote=str(cfg.path(cfg.paths.dvc_remote)))
        entry = {"name": name, "status": "failed", "cached": False}
        report["stages"].append(entry)
        try:
            result, cached = _call(run_stage, force, storage, name=name, config=cfg, inputs=inputs)
        except Exception:
            entry["wall_s"] = time.time() - stage_started
            report["wall_s"] = time.time() - started
            write_report(run_dir, report)
            raise
        same_checkpoint = result.checkpoint.digest == current.digest
        if same_checkpoint:  # a data-only stage: the policy did not change, neither did its scores
            evaluation = evals[current_name]
        else:
            evaluation, _ = _call(evaluate_checkpoint, force, storage, checkpoint=result.checkpoint, config=cfg,
                                  suites=data.suites, label=name)
        evals[name] = evaluation
        gate = cfg.stage(name).gate
        earlier = [(s, cfg.stage(s).gate) for s in STAGES[:STAGES.index(name)] if s in selected]
        verdict = judge(name, gate, evaluation, parent=current_name, evals=evals, stage_metrics=result.train_metrics,
                        confidence=cfg.evaluation.confidence, gates=cfg.gates,
                        carried=carried_checks(earlier, cfg.gates) if gate.carry_forward else [])
        _publish_gate(name, verdict)
        (run_dir / name).mkdir(parents=True, exist_ok=True)
        (run_dir / name / "gate.json").write_text(verdict.model_dump_json(indent=2))

        version = versions[current_name] if same_checkpoint else None
        if not same_checkpoint:
            dataset_tags = {d.name: d.md5 for d in result.datasets_consumed + result.datasets_produced}
            dataset_tags |= {f"{d.name} <- {label}": md5 for d in result.datasets_consumed for label, md5 in d.sources.items()}
            tags = {**lineage, "stage": name, "parent_version": str(versions[current_name] or "base"),
                    "parent_digest": current.digest, "datasets": json.dumps(dataset_tags),
                    "verifiers": json.dumps(result.verifier_versions), "cached": str(cached)}
            # A stage reused from the cache is already registered: one version per checkpoint.
            version = registry.find(name, result.checkpoint.digest)
            created = False
            if version is None:
                run_id_mlflow = None if cached else registry.log_training(
                    name, cfg.stage(name).model_dump(mode="json"), result.train_log, tags)
                version, created = registry.register_once(name, result.checkpoint, tags, run_id=run_id_mlflow)
            if created:
                registry.record_gate(version, verdict)
            else:
                recorded = registry.get(version)["tags"].get("gate")
                # None: the process died between register and record_gate; a stricter gate rejects a
                # known checkpoint. (A passed verdict never overrides a failed one: record_gate refuses.)
                if recorded is None or (not verdict.passed and recorded != "failed"):
                    registry.record_gate(version, verdict)
        result.checkpoint.version = version
        entry.update({"status": "passed" if verdict.passed else "failed", "cached": cached,
                      "wall_s": time.time() - stage_started, "checkpoint": result.checkpoint.model_dump(),
                      "gate": verdict.model_dump(), "eval": evaluation.metrics, "eval_items": evaluation.items,
                      "train_metrics": result.train_metrics, "train_log": result.train_log,
                      "policies": result.policies, "alerts": result.alerts,
                      "datasets": [d.model_dump() for d in result.datasets_produced]})
        report["wall_s"] = time.time() - started
        write_report(run_dir, report)
        logger.info(f"{name}: gate {'passed' if verdict.passed else 'FAILED'}"
                    f"{' (cached stage)' if cached else ''}; {json.dumps({c.name: c.value for c in verdict.checks})}")
        if not verdict.passed:
            failed = [f"{c.name} = {c.value} ({c.detail})" for c in verdict.checks if not c.passed]
            failed_gates.append(f"gate of {name} failed: " + "; ".join(failed))
            if on_gate_failure == "stop":
                raise GateFailed(failed_gates[-1])
            logger.warning(f"{failed_gates[-1]} (continuing: on_gate_failure=continue)")
        versions[name] = version
        current, current_name = result.checkpoint, name
        datasets = datasets + result.datasets_produced

    report["wall_s"] = time.time() - started
    report_path = write_report(run_dir, report)
    create_markdown_artifact(key="report-card", markdown=report_path.read_text(), description=f"run {run_id}")
    logger.info(f"report: {report_path}")
    if failed_gates:
        raise GateFailed(" | ".join(failed_gates) + f" (report: {report_path})")
    return {"run_id": run_id, "report": str(report_path)}
