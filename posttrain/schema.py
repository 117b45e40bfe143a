"""Typed records that pass between stages, gates, the registry and the report.

Everything here is small and JSON-serialisable: Prefect persists StageResult as the cached task
result, so a resumed run can rebuild the chain from these records alone.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from posttrain.chat import ChatConfig


class CheckpointRef(BaseModel):
    """A model directory on disk plus the digest it had when it was written."""

    path: str
    digest: str
    version: str | None = None  # registry version, once registered
    num_parameters: int | None = None

    @property
    def directory(self) -> Path:
        return Path(self.path)


class DatasetRef(BaseModel):
    """A dataset file or directory tracked by DVC; md5 is DVC's content hash."""

    name: str
    path: str
    md5: str
    rows: int | None = None
    sources: dict[str, str] = Field(default_factory=dict)  # a data role's user sources: label -> content hash
    dropped: dict[str, int] = Field(default_factory=dict)  # rows its sources' `drop:` left out, per reason


class EvalResult(BaseModel):
    """Capability metrics of one checkpoint on the held-out suites.

    `per_item` keeps one value per suite item (same order for every checkpoint) so gates can run
    paired comparisons instead of comparing two noisy means.
    """

    metrics: dict[str, float]
    per_item: dict[str, list[float]] = Field(default_factory=dict)
    items: dict[str, int] = Field(default_factory=dict)   # suite -> number of items it asked
    samples: list[dict] = Field(default_factory=list)


class GateCheck(BaseModel):
    name: str
    value: float | None
    threshold: float | None
    passed: bool
    detail: str = ""


class GateVerdict(BaseModel):
    stage: str
    passed: bool
    checks: list[GateCheck]


class StageResult(BaseModel):
    """What a stage hands to the next one and to the registry."""

    name: str
    checkpoint: CheckpointRef
    parent: CheckpointRef | None = None
    datasets_consumed: list[DatasetRef] = Field(default_factory=list)
    datasets_produced: list[DatasetRef] = Field(default_factory=list)
    train_metrics: dict[str, float] = Field(default_factory=dict)
    train_log: list[dict] = Field(default_factory=list)
    wall_s: float = 0.0
    verifier_versions: dict[str, str] = Field(default_factory=dict)
    policies: dict[str, str] = Field(default_factory=dict)  # RL: who generated rollouts, what the KL anchor is
    alerts: list[str] = Field(default_factory=list)         # training health warnings (posttrain.rl.alerts.RLAlerts)
    adapter: CheckpointRef | None = None    # a LoRA stage's adapter (its base is `parent`), merged into `checkpoint`
    trained_in: str | None = None           # the MLflow run its trainers logged to (inputs.tracking of the execution)
    reward_model: CheckpointRef | None = None   # the reward model stage's product (the policy passes through)


class StageEntry(BaseModel):
    """One column of the report card: a stage of one run (or the base it started from)."""

    name: str
    status: Literal["passed", "failed", "skipped"] = "failed"
    cached: bool = False
    wall_s: float = 0.0
    checkpoint: CheckpointRef | None = None
    gate: GateVerdict | None = None
    eval: dict[str, float | None] = Field(default_factory=dict)   # None: not a finite number
    eval_items: dict[str, int] = Field(default_factory=dict)
    train_metrics: dict[str, float | None] = Field(default_factory=dict)
    train_log: list[dict] = Field(default_factory=list)
    policies: dict[str, str] = Field(default_factory=dict)
    alerts: list[str] = Field(default_factory=list)
    datasets: list[DatasetRef] = Field(default_factory=list)   # produced by the stage


class RunReport(BaseModel):
    """One pipeline run as `runs/<run_id>/report.json` holds it: what the report card, `posttrain
    status` and the benches read."""

    run_id: str
    config: str = ""
    wall_s: float = 0.0
    sandbox: str = "not used"
    machine: str = ""   # posttrain.env.machine(): the CPU type decides float results
    data_notes: list[str] = Field(default_factory=list)   # how the data roles were made: upsampling, rows dropped
    stages: list[StageEntry] = Field(default_factory=list)

    def stage(self, name: str) -> StageEntry | None:
        return next((s for s in self.stages if s.name == name), None)

    @classmethod
    def read(cls, path: Path) -> "RunReport":
        return cls.model_validate_json(Path(path).read_text())


class ModelSettings(BaseModel):
    """How every stage loads and speaks to the models (from the config's `base:` section)."""

    dtype: Literal["auto", "bf16", "fp16", "fp32"] = "fp32"
    attn_implementation: str | None = None
    trust_remote_code: bool = False
    chat: ChatConfig = ChatConfig()


class TrackingRef(BaseModel):
    """The MLflow run a stage trains in: its trainers log there at every logging step."""

    uri: str        # tracking URI: the registry's SQLite store or its server
    run_id: str


class StageInputs(BaseModel):
    """What a stage starts from. Paths are absolute; the flow fills them in."""

    work_dir: str                       # this stage's own folder in the run
    data: dict[str, DatasetRef] = Field(default_factory=dict)  # data roles the stage reads, normalised
    probe: DatasetRef | None = None     # a held-out suite for monitoring only (never in the cache key)
    model: ModelSettings = ModelSettings()
    parent: CheckpointRef               # the checkpoint this stage continues from
    seed: int = 0
    datasets: list[DatasetRef] = Field(default_factory=list)   # produced by earlier stages
    student: CheckpointRef | None = None                        # distillation only
    # the reward model stage: the model it trains from, or the one brought; general RL: the one it scores with
    reward_model: CheckpointRef | None = None
    data_store: str | None = None       # DVC store for datasets this stage produces
    dvc_remote: str | None = None
    tracking: TrackingRef | None = None  # where training metrics go live (not in the cache key)
