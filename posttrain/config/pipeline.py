"""Pipeline configuration: one YAML file, validated by pydantic; errors name the field and the file."""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    create_model,
    field_validator,
    model_validator,
)

from posttrain.chat import ChatConfig
from posttrain.config.embedded import Architecture, PretrainConfig, WorldConfig
from posttrain.config.gates import GateConfig, GatesConfig, GateTarget
from posttrain.config.rl import (
    JudgeConfig,
    ProblemSamplingConfig,
    RewardSettings,
    RewardWeights,
    RLAlertsConfig,
)
from posttrain.config.stage_table import Stage
from posttrain.config.trainers import (
    PLACEMENT,
    GenerationEngine,
    GRPOTrainerConfig,
    LauncherConfig,
    SFTTrainerConfig,
    WorkPoolPlacement,
    check_launch,
)
from posttrain.data.decontamination import DecontaminationConfig
from posttrain.data.sources import SourceConfig, TaskKind, _as_list
from posttrain.metrics import BY_NAME as METRIC_TABLE
from posttrain.metrics import PER_LANGUAGE, suite_metrics
from posttrain.schema import ModelSettings


class Strict(BaseModel):
    # NaN or infinity in any number (nested models and `float | None` alike) is a typo, never a setting.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ConfigError(ValueError):
    pass


# ---------------------------------------------------------------- world and base


class BaseModelConfig(Strict):
    """`embedded` builds the tiny Qwen3 of this project (dvc repro); anything else is an HF id or a
    local directory of a real model, used unchanged by every stage."""

    model: str = "embedded"
    student: str = "embedded"
    dtype: Literal["auto", "bf16", "fp16", "fp32"] = "fp32"   # one precision for every stage
    attn_implementation: str | None = None                     # e.g. sdpa, flash_attention_2
    trust_remote_code: bool = False                            # run a model repository's own code
    chat: ChatConfig = ChatConfig()
    # The embedded world's tiny models (used only when model / student is `embedded`).
    teacher_architecture: Architecture = Architecture()
    student_architecture: Architecture = Architecture(hidden_size=128, intermediate_size=512)
    pretrain: PretrainConfig = PretrainConfig()
    student_pretrain: PretrainConfig = PretrainConfig(steps=400, learning_rate=4e-3)

    def settings(self) -> ModelSettings:
        return ModelSettings(dtype=self.dtype, attn_implementation=self.attn_implementation,
                             trust_remote_code=self.trust_remote_code, chat=self.chat)


class BudgetCurveConfig(Strict):
    """Accuracy as a function of the thinking budget (Qwen3 sec. 4.3, Fig. 2), measured in every
    evaluation from `from_stage` on: on the first `items` items of a think-mode math suite, greedy,
    at budgets placed at `quantiles` of that checkpoint's own think length there, at budget 0 (the
    stop-thinking sentence at once) and unlimited (the suite's plain replies). Metrics
    `<suite>/budget_<label>/{accuracy,tokens,cut}` (label q25, ..., 0, unlimited) and
    `<suite>/think_tokens` (mean think length)."""

    enabled: bool = True
    suite: str | None = None   # None: the first math suite in think mode
    quantiles: list[float] = Field([0.25, 0.5, 0.75], min_length=1)
    items: int = Field(100, ge=10)
    from_stage: str = "mode_fusion_sft"

    @field_validator("quantiles")
    @classmethod
    def _fractions(cls, value: list[float]) -> list[float]:
        if any(not 0 < q < 1 for q in value) or len(set(value)) != len(value):
            raise ValueError("quantiles must be distinct fractions strictly between 0 and 1")
        return sorted(value)


class EvaluationConfig(GenerationEngine):
    max_new_tokens: int = Field(160, ge=8)
    batch_size: int = Field(128, ge=1)  # rows per generation batch (bench/results/generation.md)
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    threads: int = Field(2, ge=1)
    budget_curve: BudgetCurveConfig = BudgetCurveConfig()


# ---------------------------------------------------------------- data


class EvalSampling(Strict):
    """Greedy (samples: 1), or pass@1 averaged over `samples` draws at temperature / top-p, as R1
    reports; a gate compares two checkpoints on the same suite, so always like with like."""

    samples: int = Field(1, ge=1)
    temperature: float = Field(0.6, gt=0)
    top_p: float = Field(0.95, gt=0, le=1)
    seed: int = Field(0, ge=0)


class EvalSuiteConfig(Strict):
    """A held-out suite: its metrics are `<name>/<metric>` (posttrain.metrics). `mode` row: each row's
    `thinking` column decides; both: the suite is asked twice, as `<name>_think` and `<name>_no_think`."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    kind: TaskKind
    mode: Literal["think", "no_think", "both", "row"] = "think"
    sources: list[SourceConfig]
    sampling: EvalSampling = EvalSampling()
    max_new_tokens: int | None = Field(None, ge=1)   # default evaluation.max_new_tokens; a tool episode's whole budget

    _one_or_many = field_validator("sources", mode="before")(lambda cls, v: _as_list(v))

    @model_validator(mode="after")
    def _sources_take_the_suite_kind(self) -> "EvalSuiteConfig":
        """A source without `kind:` holds rows of the suite's kind (a row's own `kind` column still wins)."""
        self.sources = [s if s.kind else s.model_copy(update={"kind": self.kind}) for s in self.sources]
        if self.kind == "tool" and self.sampling.samples > 1:
            raise ValueError("a tool suite is evaluated greedily, one episode per row: sampling.samples must be 1")
        return self

    def expanded(self) -> list["EvalSuiteConfig"]:
        if self.mode != "both":
            return [self]
        return [self.model_copy(update={"name": f"{self.name}_{m}", "mode": m}) for m in ("think", "no_think")]


class DataConfig(Strict):
    """Where each role of the pipeline gets its rows (posttrain.data.sources): one source or a list."""

    cold_start: list[SourceConfig] = []            # SFT: long-CoT traces (think block, answer)
    reasoning_prompts: list[SourceConfig] = []     # reasoning RL: prompts with gold answers
    rejection_prompts: list[SourceConfig] = []     # rejection sampling: prompts with gold answers
    thinking: list[SourceConfig] = []              # fusion: extra thinking traces (replayed)
    non_reasoning: list[SourceConfig] = []         # fusion: non-thinking SFT (direct answers, instructions)
    general_prompts: list[SourceConfig] = []       # general RL: prompts of any kind
    distillation_prompts: list[SourceConfig] = []  # distillation: prompts the teacher answers
    preferences: list[SourceConfig] = []           # preference pairs (posttrain.data.preferences): the reward model's
    eval: list[EvalSuiteConfig] = []
    decontamination: DecontaminationConfig = DecontaminationConfig()   # training rows vs eval items (n-grams)

    _one_or_many = field_validator("cold_start", "reasoning_prompts", "rejection_prompts", "thinking",
                                   "non_reasoning", "general_prompts", "distillation_prompts", "preferences",
                                   mode="before")(lambda cls, v: _as_list(v))

    def roles(self) -> dict[str, list[SourceConfig]]:
        return {name: getattr(self, name) for name in type(self).model_fields if name not in ("eval", "decontamination")}

    def suites(self) -> list[EvalSuiteConfig]:
        return [s for suite in self.eval for s in suite.expanded()]

    @model_validator(mode="after")
    def _unique_suites(self):
        names = [s.name for s in self.suites()]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"evaluation suite names must be unique: {', '.join(dup)}")
        return self

    def metric_names(self) -> set[str]:
        return {f"{s.name}/{m.name}" for s in self.suites() for m in suite_metrics(s.kind, s.mode)}


# Gates: posttrain/config/gates.py.


# ---------------------------------------------------------------- stages


class Placed(Strict):
    """A stage that can be sent to a Prefect work pool (`run_on`; None: the flow's own machine)."""

    run_on: WorkPoolPlacement | None = Field(None, json_schema_extra=PLACEMENT)


class Launched(Placed):
    """A training stage: also started in process or as a multi-process job (`launcher`), which its
    trainer settings must agree with (check_launch)."""

    stage: ClassVar[Stage]   # its row of STAGE_TABLE
    launcher: LauncherConfig = LauncherConfig()   # placement, but for its mixed_precision

    @model_validator(mode="after")
    def _launch(self):
        check_launch(self.stage, self.trainer, self.launcher, getattr(self, "sampling", None))
        return self


class ColdStartSFTConfig(Launched):
    """Trains on the `cold_start` data role."""

    trainer: SFTTrainerConfig = SFTTrainerConfig()
    gate: GateConfig = GateConfig()



class ReasoningRLConfig(Launched):
    """GRPO on the `reasoning_prompts` data role."""

    sampling: ProblemSamplingConfig = ProblemSamplingConfig()
    alerts: RLAlertsConfig = RLAlertsConfig()
    probe_every: int = Field(0, ge=0)    # held-out math probe every N steps (0: off)
    probe_items: int = Field(100, ge=1)  # first N items of the first evaluation suite of the prompts' kind
    rewards: RewardWeights = RewardWeights()
    reward_settings: RewardSettings = RewardSettings()
    trainer: GRPOTrainerConfig = GRPOTrainerConfig()
    gate: GateConfig = GateConfig()



class RejectionSamplingConfig(GenerationEngine, Placed):
    """Samples the `rejection_prompts` data role and keeps verified answers."""

    samples_per_prompt: int = Field(4, ge=1)
    temperature: float = Field(0.8, gt=0)
    max_new_tokens: int = Field(160, ge=8)
    min_language_consistency: float = Field(1.0, ge=0, le=1)
    max_per_prompt: int = Field(2, ge=1)
    gate: GateConfig = GateConfig(targets=[GateTarget(metric="stage.kept_rows", min=100)], regression=[])


class ModeFusionSFTConfig(Launched):
    """One SFT over the rejection-sampled set, the `thinking` and `non_reasoning` data roles, and
    no-think copies of the rejection-sampled prompts."""

    no_think_pairs: int = Field(300, ge=0)   # rejection-sampled prompts also answered without thinking
    trainer: SFTTrainerConfig = SFTTrainerConfig(learning_rate=2e-4, epochs=2)
    gate: GateConfig = GateConfig()



class RewardModelTrainerConfig(SFTTrainerConfig):
    """TRL RewardTrainer's settings: SFT's, plus the reward-centering term (Eisenstein et al.) and
    Llama 2's margin loss, which reads the pairs' `score_chosen - score_rejected`."""

    learning_rate: float = Field(1e-4, gt=0)
    epochs: float = Field(1.0, gt=0)
    max_length: int = Field(512, ge=16)
    center_rewards_coefficient: float | None = Field(None, gt=0)
    use_margin: bool = False
    sampling: Literal["random"] = "random"   # RewardTrainer's pairs have no one length to group by


class RewardModelConfig(Launched):
    """A reward model for general RL's `reward_model` reward: trained on the `preferences` data role
    with TRL's RewardTrainer, starting from `init` (`student`: base.student, the chain's small model;
    `base`: base.model; or a directory / HF id), or brought as it is (`bring`: an
    AutoModelForSequenceClassification with its own tokenizer and chat template; no training, and
    measured on the held-out pairs when the role is given). Skipped when neither is configured."""

    bring: str | None = None
    init: str = "student"
    held_out: float = Field(0.1, gt=0, lt=1)   # share of prompts whose pairs measure the model
    batch_size: int = Field(16, ge=1)           # scoring batch, in the gate and during RL
    trainer: RewardModelTrainerConfig = RewardModelTrainerConfig()
    gate: GateConfig = GateConfig(targets=[GateTarget(metric="stage.pairwise_accuracy", min=0.6)], regression=[])

    def source(self) -> tuple[str, str]:
        """(config field, location) of the model the stage hands on (`bring`) or trains from (`init`)."""
        return ("stages.reward_model.bring", self.bring) if self.bring else ("stages.reward_model.init", self.init)


class GeneralRLConfig(Launched):
    """GRPO on the `general_prompts` data role; each row's kind picks its rewards."""

    judge: JudgeConfig | None = None   # the `judge` reward's model (posttrain.rewards.judge)
    alerts: RLAlertsConfig = RLAlertsConfig()
    rewards: RewardWeights = RewardWeights(correctness=1.0, format=0.1, instruction=1.0)
    reward_settings: RewardSettings = RewardSettings()
    trainer: GRPOTrainerConfig = GRPOTrainerConfig(max_steps=40)
    gate: GateConfig = GateConfig()



class DistillationStageConfig(GenerationEngine, Placed):
    """The teacher answers the `distillation_prompts` data role; the student learns its verified answers.
    `backend` writes the teacher's answers; the on-policy phase samples through TRL."""

    max_new_tokens: int = Field(160, ge=8)
    verified_only: bool = True  # train only on teacher responses the verifiers accept
    # A prompt whose greedy reply is refused is sampled again `resample` times at `resample_temperature`
    # (rows of `resample_kinds`, every kind when unset); the first verified sample is taught.
    resample: int = Field(0, ge=0)
    resample_temperature: float = Field(0.8, gt=0)
    resample_kinds: list[TaskKind] | None = None
    sft: SFTTrainerConfig = SFTTrainerConfig(learning_rate=1e-3, epochs=2)
    on_policy_steps: int = Field(0, ge=0)  # TRL DistillationTrainer (generalised JSD) after the SFT phase
    on_policy_learning_rate: float = Field(5e-5, gt=0)
    max_parameter_ratio: float = Field(1 / 3, gt=0, le=1)
    gate: GateConfig = GateConfig()


def _reward_model_wanted(cfg) -> str | None:
    if cfg.data.preferences or cfg.stages.reward_model.bring:
        return None
    return "no reward model (neither data.preferences nor stages.reward_model.bring is set)"


_WRITES_DATASET = "writes its dataset to the data store before training, from every process under a multi-process launcher"
# The chain, in order: adding a stage is one row here plus its `stages/<name>.py` (and its config
# class above). STAGES, StageName (CLI choices, the flow's `stages` parameter), the `stages:`
# section of the YAML, the roles each stage is given and the launch checks all follow from it.
STAGE_TABLE: tuple[Stage, ...] = (
    Stage("cold_start_sft", ColdStartSFTConfig, reads=("cold_start",)),
    Stage("reasoning_rl", ReasoningRLConfig, reads=("reasoning_prompts",), probe=True),
    Stage("rejection_sampling", RejectionSamplingConfig, reads=("rejection_prompts",)),
    Stage("mode_fusion_sft", ModeFusionSFTConfig, optional=("thinking", "non_reasoning"), single_process=_WRITES_DATASET),
    Stage("reward_model", RewardModelConfig, optional=("preferences",), reward_model="makes",
          skipped_unless=_reward_model_wanted, single_process="saves its reward model from this process only"),
    Stage("general_rl", GeneralRLConfig, reads=("general_prompts",), reward_model="uses"),
    Stage("distillation", DistillationStageConfig, reads=("distillation_prompts",), student=True,
          single_process=_WRITES_DATASET),
)
STAGE_BY_NAME: dict[str, Stage] = {stage.name: stage for stage in STAGE_TABLE}
STAGE_CONFIGS: dict[str, type[Strict]] = {stage.name: stage.config for stage in STAGE_TABLE}
for _stage in STAGE_TABLE:
    _stage.config.stage = _stage
STAGES: tuple[str, ...] = tuple(STAGE_CONFIGS)
StageName = Literal[STAGES]
StagesConfig = create_model("StagesConfig", __base__=Strict, __doc__="Each stage's settings, by stage name.",
                            **{name: (config, config()) for name, config in STAGE_CONFIGS.items()})


class SandboxConfig(Strict):
    """Code rewards run untrusted programs: only under OS isolation (bubblewrap or namespaces,
    posttrain.rewards.code_sandbox) unless this opt-in says otherwise; it is recorded in the lineage."""

    unsafe_allow_unisolated: bool = False


def registry_server(location: str) -> str | None:
    """The MLflow tracking server `paths.registry` names (`http(s)://host[:port][/prefix]`), or None
    when it is a folder. Any other scheme is refused: the folder's SQLite store and a server are the
    two registries this pipeline knows. Credentials stay out of the URI (configs are hashed into the
    lineage and copied into reports); MLflow reads them from MLFLOW_TRACKING_TOKEN or
    MLFLOW_TRACKING_USERNAME/PASSWORD."""
    from urllib.parse import urlsplit

    parts = urlsplit(location)
    if not parts.scheme or len(parts.scheme) == 1:  # a path (a one-letter "scheme" is a drive)
        return None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{location!r} is neither a folder nor an MLflow tracking server: scheme "
                         f"{parts.scheme!r} is not supported (a server is http://host:port or https://...; "
                         "a folder holds the SQLite store mlflow.db)")
    try:
        parts.port
    except ValueError:
        raise ValueError(f"{location!r}: the port is not a number in 0-65535") from None
    if not parts.hostname:
        raise ValueError(f"{location!r} names no host (write http://host:port)")
    if parts.username or parts.password:
        raise ValueError("no credentials in the registry URI (configs are recorded): set MLFLOW_TRACKING_TOKEN "
                         "or MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD in the environment")
    if parts.query or parts.fragment:
        raise ValueError(f"{location!r}: an MLflow server URI takes no query or fragment")
    return location.rstrip("/")


class PathsConfig(Strict):
    """Relative paths resolve against the directory that holds the config's project (see `root`)."""

    world: str = Field("data", min_length=1)
    runs: str = Field("runs", min_length=1)
    # A folder (its SQLite store, mlflow.db) or an MLflow tracking server, http://host:port (`make mlflow`)
    registry: str = Field("runs/registry", min_length=1)
    data_store: str = Field("runs/data-store", min_length=1)
    dvc_remote: str = Field("runs/dvc-remote", min_length=1)

    @field_validator("registry")
    @classmethod
    def _registry_location(cls, value: str) -> str:
        return registry_server(value) or value


class PipelineConfig(Strict):
    name: str = "default"
    seed: int = Field(0, ge=0, le=2**32 - 1)   # numpy's seed range (transformers.set_seed)
    paths: PathsConfig = PathsConfig()
    world: WorldConfig = WorldConfig()
    base: BaseModelConfig = BaseModelConfig()
    data: DataConfig = DataConfig()
    sandbox: SandboxConfig = SandboxConfig()
    gates: GatesConfig = GatesConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    stages: StagesConfig = StagesConfig()
    root: str = "."  # filled by load_config: the project directory relative paths hang off

    def path(self, relative: str) -> Path:
        p = Path(relative)
        return p if p.is_absolute() else (Path(self.root) / p).absolute()

    def budget_curve_suite(self) -> str | None:
        """The suite the thinking-budget curve is measured on: the configured one, or the first
        math suite in think mode."""
        curve = self.evaluation.budget_curve
        if curve.suite is not None:
            return curve.suite
        return next((s.name for s in self.data.suites() if s.kind == "math" and s.mode == "think"), None)

    def budget_curve_for(self, label: str) -> bool:
        """Whether the evaluation of `label` (a stage name or `base`) measures the curve."""
        curve = self.evaluation.budget_curve
        return (curve.enabled and self.budget_curve_suite() is not None and label in STAGES
                and STAGES.index(label) >= STAGES.index(curve.from_stage))

    def stage(self, name: str) -> BaseModel:
        return getattr(self.stages, name)

    @model_validator(mode="after")
    def _world_relative_sources(self):
        """A source path may start with `{paths.world}`: the embedded world's folder, wherever
        `paths.world` puts it (the smoke config keeps its world under runs/)."""
        sources = [s for role in self.data.roles().values() for s in role]
        sources += [s for suite in self.data.eval for s in suite.sources]
        for source in sources:
            if source.path and source.path.startswith("{paths.world}"):
                source.path = self.paths.world + source.path.removeprefix("{paths.world}")
        return self

    @model_validator(mode="after")
    def _budget_curve_suite_exists(self):
        curve = self.evaluation.budget_curve
        if curve.from_stage not in STAGES:
            raise ValueError(f"evaluation.budget_curve.from_stage: {curve.from_stage!r} is not a stage "
                             f"({', '.join(STAGES)})")
        if curve.suite is not None:
            suite = next((s for s in self.data.suites() if s.name == curve.suite), None)
            if suite is None or suite.kind != "math" or suite.mode != "think":
                raise ValueError(f"evaluation.budget_curve.suite: {curve.suite!r} is not a math suite in think mode "
                                 f"(suites: {', '.join(f'{s.name} ({s.kind}, {s.mode})' for s in self.data.suites())})")
        return self

    @model_validator(mode="after")
    def _judge_given(self):
        weight = self.stages.general_rl.rewards.judge
        if weight and self.stages.general_rl.judge is None:
            raise ValueError(f"stages.general_rl.rewards.judge is {weight}, but stages.general_rl.judge is not set "
                             "(a judge `model` or `endpoint`)")
        return self

    @model_validator(mode="after")
    def _reward_model_given(self):
        """A stage that weighs the reward model's score needs one: trained on data.preferences or brought."""
        for stage in STAGE_TABLE:
            weight = getattr(getattr(self.stage(stage.name), "rewards", None), "reward_model", 0)
            if stage.reward_model == "uses" and weight and (missing := _reward_model_wanted(self)):
                raise ValueError(f"stages.{stage.name}.rewards.reward_model is {weight}, but there is {missing}")
        measured = [t.metric for t in self.stages.reward_model.gate.targets if t.metric.startswith("stage.")]
        if self.stages.reward_model.bring and not self.data.preferences and measured:
            raise ValueError(f"stages.reward_model.gate reads {', '.join(measured)}, measured on held-out preference "
                             "pairs, but data.preferences is not set: give the pairs or set the gate's targets: []")
        return self

    @model_validator(mode="after")
    def _gates_name_what_exists(self):
        """Every metric a gate reads is produced by an evaluation suite, and every stage it compares
        with runs before it: checked now, not after the stage has trained."""
        metrics, suites = self.data.metric_names(), {s.name for s in self.data.suites()}
        problems = []
        for index, name in enumerate(STAGES):
            gate = self.stage(name).gate
            earlier = {"parent", "base", *STAGES[:index]}
            for where, metric in gate.metrics():
                suite, _, short = metric.rpartition("/")
                known = metric in metrics or (short.startswith(PER_LANGUAGE) and suite in suites)
                if not known and not metric.startswith("stage."):
                    problems.append(f"stages.{name}.gate.{where}: unknown metric {metric!r} "
                                    f"(known: {', '.join(sorted(metrics)) or 'none: data.eval has no suites'})")
                elif "/" in metric and METRIC_TABLE.get(short) and METRIC_TABLE[short].higher_is_better is None:
                    problems.append(f"stages.{name}.gate.{where}: {metric!r} is descriptive and cannot be gated")
            for i, target in enumerate(gate.targets):
                if target.curve is not None and not self.budget_curve_for(name):
                    curve = self.evaluation.budget_curve
                    problems.append(
                        f"stages.{name}.gate.targets[{i}]: a curve target needs the thinking-budget curve of suite "
                        f"{target.metric!r} in {name}'s evaluation (evaluation.budget_curve: enabled "
                        f"{curve.enabled}, suite {self.budget_curve_suite()!r}, from_stage {curve.from_stage})")
                for ref in target.references():
                    if ref not in earlier:
                        problems.append(f"stages.{name}.gate.targets[{i}]: {ref!r} is not a stage before {name} "
                                        f"(use parent, base, or one of: {', '.join(STAGES[:index]) or 'none'})")
        if problems:
            raise ValueError("; ".join(problems))
        return self
