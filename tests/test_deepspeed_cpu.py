"""DeepSpeed executed on CPU: the shipped configs/accelerate/zero2.yaml and zero3.yaml, unchanged,
launched by posttrain's launcher with 2 processes and only `--num_processes` and `--mixed_precision no`
given on the command line (DeepSpeed picks its CPU accelerator and gloo by itself). Cold-start SFT
trains and its checkpoint, gathered from the ranks' shards, loads as the whole model.

These tests run where the engines extra is installed (`python scripts/install.py --engines cpu`, CI's
engine step); without DeepSpeed they skip."""
from __future__ import annotations

import pytest

pytest.importorskip("deepspeed", reason="DeepSpeed is not installed: python scripts/install.py --engines cpu")
pytestmark = [pytest.mark.engines, pytest.mark.timeout(1800)]

from conftest import cold_start_inputs  # noqa: E402
from posttrain.config.trainers import LauncherConfig  # noqa: E402


@pytest.mark.parametrize("profile", ["zero3", "zero2"])
def test_the_shipped_deepspeed_profiles_train_cold_start_on_two_cpu_processes(tmp_path, profile):
    import torch

    from posttrain.registry.checkpoint import load_checkpoint
    from posttrain.training.launcher import command, launch

    cfg, parent, inputs = cold_start_inputs(tmp_path, profile)
    work = tmp_path / "runs" / profile / "cold_start_sft"
    launcher = LauncherConfig(kind="accelerate", config_file=f"configs/accelerate/{profile}.yaml", num_processes=2,
                              mixed_precision="no")
    argv = command(launcher, work / "request.json")
    assert argv[argv.index("--mixed_precision") + 1] == "no" and argv[argv.index("--num_processes") + 1] == "2"
    result = launch("cold_start_sft", cfg.stage("cold_start_sft"), inputs, launcher)
    metrics = result.train_metrics
    rows = inputs.data["cold_start"].rows
    assert rows and metrics["loss"] > 0 and metrics["examples"] == rows, metrics
    assert (metrics["processes"], metrics["zero_stage"]) == (2, int(profile[-1])), metrics
    if profile == "zero3":   # each rank held about half of the parameters (ZeRO-3 pads shards to even sizes)
        assert 0.45 <= metrics["parameter_share_per_rank"] <= 0.55, metrics
    else:                    # ZeRO-2 shards gradients and optimizer state, not the weights
        assert metrics["parameter_share_per_rank"] == 1.0, metrics
    model, _ = load_checkpoint(result.checkpoint, for_training=False)
    base, _ = load_checkpoint(parent, for_training=False)
    trained, before = dict(model.named_parameters()), dict(base.named_parameters())
    assert {n: p.shape for n, p in trained.items()} == {n: p.shape for n, p in before.items()}
    assert all(p.numel() > 0 for p in trained.values()), "a shard, not the gathered weights"
    assert any(not torch.equal(p, before[n]) for n, p in trained.items()), "the checkpoint is the base model"


def test_zero3_on_two_ranks_trains_what_one_process_trains(tmp_path):
    """Same seed, same global batches: the 2-rank ZeRO-3 job's losses step by step and its gathered
    checkpoint's logits are the in-process run's, within 1e-4."""
    import torch

    from posttrain.registry.checkpoint import load_checkpoint
    from posttrain.training.launcher import launch

    cfg, _, alone = cold_start_inputs(tmp_path, "alone")
    _, _, sharded = cold_start_inputs(tmp_path, "sharded")
    one = launch("cold_start_sft", cfg.stage("cold_start_sft"), alone, LauncherConfig())
    two = launch("cold_start_sft", cfg.stage("cold_start_sft"), sharded,
                 LauncherConfig(kind="accelerate", config_file="configs/accelerate/zero3.yaml", num_processes=2,
                                mixed_precision="no"))
    losses = [[row["loss"] for row in result.train_log if "loss" in row] for result in (one, two)]
    assert len(losses[0]) == len(losses[1]) >= 2
    assert max(abs(a - b) for a, b in zip(*losses)) < 1e-4, losses
    (model_one, tokenizer), (model_two, _) = (load_checkpoint(r.checkpoint, for_training=False) for r in (one, two))
    ids = tokenizer(["What is 12 plus 30?", "12+30: 2+0=2, write 2"], return_tensors="pt", padding=True)
    with torch.no_grad():
        gap = (model_one(**ids).logits - model_two(**ids).logits).abs().max().item()
    assert gap < 1e-4, gap


# ----------------------------------------------------------------------------- GRPO under ZeRO

def _zero_rl_inputs(tmp_path, profile: str, **trainer):
    """Reasoning RL of a user project (tests/userdata.py) as a 2-process job on the shipped ZeRO
    profile, the held-out probe on, from a tiny Qwen3 first taught to answer sums in the chat format
    (so that rewards differ within a group and GRPO has a gradient): (stage config, StageInputs, the
    request file the ranks are started with)."""
    import yaml
    from transformers import AutoTokenizer

    from flows.chain import base_checkpoint
    from posttrain.config.loading import load_config
    from posttrain.data.prepared import prepare
    from posttrain.schema import StageInputs
    from tests.userdata import build_project, train_on_sums

    config = build_project(tmp_path)
    teacher = tmp_path / "models" / "teacher"
    train_on_sums(teacher, AutoTokenizer.from_pretrained(teacher), steps=300, hi=99)
    raw = yaml.safe_load(config.read_text())
    raw["stages"]["reasoning_rl"]["trainer"].update(threads=1, prompts_per_step=4, num_generations=4,
                                                    max_completion_length=40, learning_rate=1e-4,
                                                    monitor_kl=profile != "zero3", **trainer)
    raw["stages"]["reasoning_rl"].update(probe_every=2, probe_items=4, launcher={
        "kind": "accelerate", "config_file": f"configs/accelerate/{profile}.yaml", "num_processes": 2,
        "mixed_precision": "no"})
    config.write_text(yaml.safe_dump(raw))
    cfg = load_config(config)
    data = prepare(cfg, tmp_path / "runs" / "prepared", ("reasoning_rl",))
    work = tmp_path / "runs" / profile / "reasoning_rl"
    inputs = StageInputs(parent=base_checkpoint(cfg), work_dir=str(work), seed=0, model=cfg.base.settings(),
                         data=data.for_stage("reasoning_rl"), probe=data.probe(cfg))
    return cfg.stage("reasoning_rl"), inputs, work / "launch" / "request.json"


def test_grpo_steps_under_zero2_on_two_cpu_processes(tmp_path):
    from posttrain.registry.checkpoint import load_checkpoint
    from posttrain.training.launcher import launch

    stage, inputs, _ = _zero_rl_inputs(tmp_path, "zero2", max_steps=3)
    result = launch("reasoning_rl", stage, inputs, stage.launcher)
    metrics = result.train_metrics
    assert (metrics["processes"], metrics["zero_stage"], metrics["parameter_share_per_rank"]) == (2, 2, 1.0), metrics
    steps = [row for row in result.train_log if "reward" in row]
    assert len(steps) == 3, result.train_log
    assert any(row["reward_std"] > 0 and row["grad_norm"] > 0 for row in steps), steps   # a gradient to follow
    assert [row["step"] for row in result.train_log if "heldout/math_accuracy" in row] == [0, 2, 3]
    model, _ = load_checkpoint(result.checkpoint, for_training=False)
    base, _ = load_checkpoint(inputs.parent, for_training=False)
    before = dict(base.named_parameters())
    assert any(not p.equal(before[n]) for n, p in model.named_parameters()), "GRPO under ZeRO-2 trained nothing"


def test_a_killed_rank_fails_grpo_under_zero3_and_a_rerun_resumes_from_the_sharded_checkpoint(tmp_path):
    """Reasoning RL under ZeRO-3 on 2 processes, each rank holding half the parameters; rank 1 is
    killed after the first in-stage checkpoint: the stage fails naming rank 1 and SIGKILL; the rerun
    loads that checkpoint's parameter and optimizer shards and trains to the end; the weights are
    gathered into one checkpoint."""
    from test_launcher import launch_killing_rank_1

    from posttrain.registry.checkpoint import load_checkpoint
    from posttrain.training.launcher import launch

    stage, inputs, request = _zero_rl_inputs(tmp_path, "zero3", max_steps=30, save_steps=2)
    work = request.parent.parent
    killed, failed = launch_killing_rank_1(stage, inputs, work, request)
    assert killed, f"rank 1 was never killed; the stage ended with: {failed}"
    assert "rank 1 of 2" in str(failed) and "SIGKILL" in str(failed), str(failed)
    left = sorted(work.glob("trainer/checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert left and any(left[-1].glob("global_step*/*optim_states.pt")), "no sharded DeepSpeed checkpoint was left"

    result = launch("reasoning_rl", stage, inputs, stage.launcher)
    assert result.policies["resumed_from"] == str(left[-1]), (result.policies, left)
    assert 0.45 <= result.train_metrics["parameter_share_per_rank"] <= 0.55, result.train_metrics
    assert max(row["step"] for row in result.train_log if "reward" in row) == 30
    model, _ = load_checkpoint(result.checkpoint, for_training=False)
    base, _ = load_checkpoint(inputs.parent, for_training=False)
    before = dict(base.named_parameters())
    assert {n: p.shape for n, p in model.named_parameters()} == {n: p.shape for n, p in before.items()}
    assert any(not p.equal(before[n]) for n, p in model.named_parameters())
