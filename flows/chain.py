"""The steps of one pipeline run, one method each, in the order flows/pipeline.py calls them:
prepare the data, evaluate the base, and for every stage train (or reuse), evaluate, judge,
register and record. The run's typed report (posttrain.schema.RunReport) is rewritten after every
step that changes it, so a run that dies leaves a report that says where.
"""
from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.remote import check_work_pools
from flows.tasks import call_cached, code_state, evaluate_checkpoint, run_stage
from posttrain.config.pipeline import STAGE_BY_NAME, STAGE_TABLE, STAGES, PipelineConfig
from posttrain.config.loading import config_hash
from posttrain.env import machine
from posttrain.evaluation.gates import carried_checks, judge
from posttrain.data.prepared import PreparedData, prepare
from posttrain.registry.model_registry import Registry
from posttrain.evaluation.report import write_report
from posttrain.schema import CheckpointRef, EvalResult, GateVerdict, RunReport, StageEntry, StageInputs, StageResult


class GateFailed(RuntimeError):
    pass


def base_checkpoint(cfg: PipelineConfig, which: str = "teacher") -> CheckpointRef:
    """The starting checkpoint: the embedded world's base, or the configured model (HF id / path)."""
    from posttrain.registry.checkpoint import configured_model

    if (cfg.base.model if which == "teacher" else cfg.base.student) == "embedded":
        from posttrain.world.build import base_checkpoint as embedded_base

        return embedded_base(cfg, which)
    return model_checkpoint(cfg, configured_model(cfg, which))


def model_checkpoint(cfg: PipelineConfig, location: str) -> CheckpointRef:
    """A model the config names (a local directory or a hub id in the local cache) as a checkpoint."""
    from posttrain.registry.checkpoint import foreign_digest

    if Path(location).is_dir():
        return CheckpointRef(path=location, digest=foreign_digest(Path(location), cfg.path(cfg.paths.runs) / "manifests"))
    return CheckpointRef(path=location, digest=f"hub:{location}")


def code_isolation(cfg: PipelineConfig, data: PreparedData) -> str:
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


class ChainRun:
    """One run of the chain: its config, run folder, data, registry and report."""

    def __init__(self, cfg: PipelineConfig, run_id: str, run_dir: Path, config_path: str, selected: set[str],
                 force: bool, started: float):
        self.cfg, self.run_dir, self.force = cfg, run_dir, force
        # A selected stage with nothing to do in this config (no reward model configured) is skipped.
        self.unneeded = {stage.name: reason for stage in STAGE_TABLE
                         if stage.skipped_unless and (reason := stage.skipped_unless(cfg))}
        self.selected = [name for name in STAGES if name in selected and name not in self.unneeded]
        self.reward_model: CheckpointRef | None = None   # the reward model stage's, once it has run
        makes = [s for s in self.selected if STAGE_BY_NAME[s].reward_model == "makes"]
        for name in self.selected:
            rewards = getattr(cfg.stage(name), "rewards", None)
            if STAGE_BY_NAME[name].reward_model == "uses" and rewards is not None and rewards.reward_model and not makes:
                raise ValueError(f"stages.{name}.rewards.reward_model is {rewards.reward_model} but no reward model "
                                 f"stage runs before it ({next(iter(self.unneeded.values()), 'not selected')})")
        self.started = self.stage_started = started
        self.storage = cfg.path(cfg.paths.runs) / "prefect-results"
        self.log = get_run_logger()
        self.report = RunReport(run_id=run_id, config=config_path, machine=machine())
        self.evals: dict[str, EvalResult] = {}
        self.training_runs: dict[str, str] = {}  # stage -> the MLflow run it trained in (this flow run)

    def prepare_data(self) -> None:
        """The embedded world if a model is `embedded`, every data role normalised and content-
        addressed, the code sandbox checked, the registry opened: all before any training."""
        cfg = self.cfg
        from posttrain.registry.checkpoint import check_models

        for line in check_models(cfg, self.selected):
            self.log.info(line)
        if "embedded" in (cfg.base.model, cfg.base.student):
            from posttrain.world.build import ensure_world

            ensure_world(cfg, log=self.log.info)
        self.data = prepare(cfg, cfg.path(cfg.paths.runs) / "prepared", tuple(self.selected))
        self.report.data_notes = [n for d in self.data.loaded.values() for n in d.notes]
        for note in self.report.data_notes:
            self.log.info(note)
        self.report.sandbox = code_isolation(cfg, self.data)
        check_work_pools(cfg, self.selected)
        self.registry = Registry.for_config(cfg)
        code = code_state()
        if code["dirty"]:
            self.log.warning(f"stages/, posttrain/ or flows/ have uncommitted changes (diff {code['dirty']}): "
                             "recorded in the lineage; the stage cache only matches runs of this exact diff")
        self.lineage = {"flow_run": self.report.run_id, "config_hash": config_hash(cfg),
                        "code_revision": code["revision"], "code_dirty": code["dirty"] or "no",
                        "sandbox": self.report.sandbox, "seed": str(cfg.seed)}

    def evaluate_base(self) -> StageEntry:
        base = base_checkpoint(self.cfg, "teacher")
        evaluation, cached = call_cached(evaluate_checkpoint, self.force, self.storage, checkpoint=base,
                                         config=self.cfg, suites=self.data.suites, label="base")
        self.evals["base"] = evaluation
        entry = StageEntry(name="base", status="passed", cached=cached, checkpoint=base, eval=evaluation.metrics,
                           eval_items=evaluation.items)
        self.report.stages.append(entry)
        return entry

    def skip(self, name: str) -> None:
        """A stage left out of this run: deselected (a report column says so), or with nothing to do
        in this config (no column: it is not part of the configured chain)."""
        if name in self.unneeded:
            self.log.info(f"{name}: not part of this chain ({self.unneeded[name]})")
            return
        self.report.stages.append(StageEntry(name=name, status="skipped"))

    def reward_model_for(self, name: str) -> CheckpointRef | None:
        """What a stage's reward model is: the one the reward model stage trains from (or was
        brought), for that stage; the one it produced, for a stage that scores with it."""
        role = STAGE_BY_NAME[name].reward_model
        if role == "uses":   # handed only to a stage that weighs it (it keys the stage's cache)
            rewards = getattr(self.cfg.stage(name), "rewards", None)
            return self.reward_model if rewards is not None and rewards.reward_model else None
        if role != "makes":
            return None
        field, location = self.cfg.stages.reward_model.source()
        if field.endswith("init") and location in ("student", "base"):
            return base_checkpoint(self.cfg, "student" if location == "student" else "teacher")
        local = self.cfg.path(location)
        return model_checkpoint(self.cfg, str(local) if local.is_dir() else location)

    def train(self, name: str, parent: StageEntry) -> tuple[StageResult, bool]:
        """The stage's result, from the cache when its inputs are unchanged; (result, cached). The
        stage trains in an MLflow run opened here, so its curves reach the registry while it runs;
        the run is closed with the stage (deleted if the stage came from the cache, or if the stage was a
        remote run an interrupted attempt dispatched: that one keeps the run it trained in)."""
        self.stage_started = time.time()
        entry = StageEntry(name=name)  # "failed" until recorded: a crash leaves the report saying where
        self.report.stages.append(entry)
        inputs = StageInputs(
            work_dir=str(self.run_dir / name), data=self.data.for_stage(name), model=self.cfg.base.settings(),
            parent=parent.checkpoint, probe=self.data.probe(self.cfg) if STAGE_BY_NAME[name].probe else None,
            seed=self.cfg.seed, datasets=[d for s in self.report.stages for d in s.datasets],
            student=base_checkpoint(self.cfg, "student") if STAGE_BY_NAME[name].student else None,
            reward_model=self.reward_model_for(name),
            data_store=str(self.cfg.path(self.cfg.paths.data_store)),
            dvc_remote=str(self.cfg.path(self.cfg.paths.dvc_remote)),
            tracking=self.registry.start_training(name, self.lineage))
        if url := self.registry.run_url(inputs.tracking.run_id):
            self.log.info(f"{name}: training curves live at {url}")
        try:
            result, cached = call_cached(run_stage, self.force, self.storage, name=name, config=self.cfg, inputs=inputs)
        except Exception as exc:
            entry.wall_s = time.time() - self.stage_started
            self.write()
            with contextlib.suppress(Exception):  # the stage's own error is the one to report
                for run_id in {inputs.tracking.run_id, getattr(exc, "trained_in", None)} - {None}:
                    self.registry.end_training(run_id, "FAILED")
            raise
        # a stage that trains the reward model hands its parent's policy on by design
        trains_policy = STAGE_BY_NAME[name].reward_model != "makes"
        if trains_policy and result.train_log and result.checkpoint.digest == parent.checkpoint.digest:
            result = result.model_copy(update={"alerts": [*result.alerts, (
                f"{name} trained but left its parent's weights unchanged (every step's update was zero: e.g. every "
                "GRPO group's rewards equal, so no advantage): it keeps the parent's registry version; raise "
                "max_steps, or check the rewards on its prompts")]})
            self.log.warning(result.alerts[-1])
        # A cached stage trained in no run; an adopted remote one trained in the run its first dispatch opened.
        trained_in = None if cached else result.trained_in or inputs.tracking.run_id
        if trained_in != inputs.tracking.run_id:
            self.registry.discard_training(inputs.tracking.run_id)
        if trained_in:
            self.registry.finish_training(trained_in, self.cfg.stage(name).model_dump(mode="json"), result.train_log)
            self.training_runs[name] = trained_in
        if result.reward_model is not None:
            self.reward_model = result.reward_model
        return result, cached

    def evaluate(self, name: str, result: StageResult, parent: StageEntry) -> EvalResult:
        """Held-out scores of the stage's checkpoint; a data-only stage (same checkpoint) keeps its
        parent's, since the policy did not change."""
        if result.checkpoint.digest == parent.checkpoint.digest:
            evaluation = self.evals[parent.name]
        else:
            # once the reward model stage has run, open-ended suites also report its score (never gated)
            evaluation, _ = call_cached(evaluate_checkpoint, self.force, self.storage, checkpoint=result.checkpoint,
                                        config=self.cfg, suites=self.data.suites, label=name,
                                        reward_model=self.reward_model)
        self.evals[name] = evaluation
        return evaluation

    def judge(self, name: str, result: StageResult, evaluation: EvalResult, parent: StageEntry) -> GateVerdict:
        """The stage's gate, plus every check an earlier gate made (carry_forward) in one family."""
        cfg, gate = self.cfg, self.cfg.stage(name).gate
        earlier = [(s, cfg.stage(s).gate) for s in self.selected[:self.selected.index(name)]]
        verdict = judge(name, gate, evaluation, parent=parent.name, evals=self.evals, stage_metrics=result.train_metrics,
                        confidence=cfg.evaluation.confidence, gates=cfg.gates,
                        carried=carried_checks(earlier, cfg.gates) if gate.carry_forward else [])
        create_table_artifact(
            key=f"gate-{name.replace('_', '-')}",
            table=[{"check": c.name, "value": c.value, "threshold": c.threshold, "passed": c.passed,
                    "detail": c.detail} for c in verdict.checks],
            description=f"Gate verdict for {name}: {'passed' if verdict.passed else 'FAILED'}")
        (self.run_dir / name).mkdir(parents=True, exist_ok=True)
        (self.run_dir / name / "gate.json").write_text(verdict.model_dump_json(indent=2))
        return verdict

    def register(self, name: str, result: StageResult, verdict: GateVerdict, cached: bool,
                 parent: StageEntry) -> str | None:
        """The registry version of the stage's checkpoint, with its lineage and verdict (a data-only
        stage keeps its parent's version). A reward model is registered as a version of its own
        model (`posttrain-<name>-reward-model`); a stage that scored with one names it in its tags."""
        consumed = {d.name: d.md5 for d in result.datasets_consumed}
        consumed |= {f"{d.name} <- {label}": md5 for d in result.datasets_consumed for label, md5 in d.sources.items()}
        if result.reward_model is not None:
            reward_models = Registry.for_config(self.cfg, suffix="-reward-model")
            version = reward_models.register_stage(name, result.reward_model, {
                **self.lineage, "stage": name, "datasets": json.dumps(consumed), "cached": str(cached),
                "verifiers": json.dumps(result.verifier_versions)}, verdict)
            self.log.info(f"{name}: reward model registered as {reward_models.model_name} version {version}")
        if result.checkpoint.digest == parent.checkpoint.digest:
            return parent.checkpoint.version
        tags = {**self.lineage, "stage": name, "parent_version": str(parent.checkpoint.version or "base"),
                "parent_digest": parent.checkpoint.digest, "datasets": json.dumps(consumed),
                "datasets_produced": json.dumps({d.name: d.md5 for d in result.datasets_produced}),
                "rows_dropped": json.dumps({d.name: d.dropped for d in result.datasets_consumed if d.dropped}),
                "verifiers": json.dumps(result.verifier_versions), "cached": str(cached)}
        if (used := self.reward_model_for(name)) is not None and STAGE_BY_NAME[name].reward_model == "uses":
            tags["reward_model"] = f"{used.path} (digest {used.digest})"
        if result.adapter is not None:  # a LoRA stage: its adapter, on the parent's weights
            tags |= {"adapter_path": result.adapter.path, "adapter_digest": result.adapter.digest}
        return self.registry.register_stage(name, result.checkpoint, tags, verdict,
                                            log_training=None if cached else lambda: self._training_run(name, tags))

    def _training_run(self, name: str, tags: dict) -> str:
        """The run the stage trained in, tagged with its version's lineage."""
        run_id = self.training_runs[name]
        self.registry.tag_training(run_id, tags)
        return run_id

    def record(self, name: str, result: StageResult, cached: bool, evaluation: EvalResult, verdict: GateVerdict,
               version: str | None) -> StageEntry:
        """The stage's column of the report card; it becomes the next stage's parent."""
        entry = self.report.stages[-1] = self.report.stages[-1].model_copy(update=dict(
            status="passed" if verdict.passed else "failed", cached=cached, wall_s=time.time() - self.stage_started,
            checkpoint=result.checkpoint.model_copy(update={"version": version}), gate=verdict,
            eval=evaluation.metrics, eval_items=evaluation.items, train_metrics=result.train_metrics,
            train_log=result.train_log, policies=result.policies, alerts=result.alerts,
            datasets=result.datasets_produced))
        self.write()
        self.log.info(f"{name}: gate {'passed' if verdict.passed else 'FAILED'}{' (cached stage)' if cached else ''}; "
                      f"{json.dumps({c.name: c.value for c in verdict.checks})}")
        return entry

    def write(self) -> Path:
        self.report.wall_s = time.time() - self.started
        return write_report(self.run_dir, self.report)

    def finish(self, failed_gates: list[str]) -> dict:
        report_path = self.write()
        create_markdown_artifact(key="report-card", markdown=report_path.read_text(),
                                 description=f"run {self.report.run_id}")
        self.log.info(f"report: {report_path}")
        if failed_gates:
            raise GateFailed(" | ".join(failed_gates) + f" (report: {report_path})")
        return {"run_id": self.report.run_id, "report": str(report_path)}


def gate_failure(name: str, verdict: GateVerdict) -> str:
    return f"gate of {name} failed: " + "; ".join(f"{c.name} = {c.value} ({c.detail})"
                                                  for c in verdict.checks if not c.passed)
