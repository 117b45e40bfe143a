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
from posttrain.trainer_config import LauncherConfig  # noqa: E402


@pytest.mark.parametrize("profile", ["zero3", "zero2"])
def test_the_shipped_deepspeed_profiles_train_cold_start_on_two_cpu_processes(tmp_path, profile):
    import torch

    from posttrain.checkpoint import load_checkpoint
    from posttrain.launcher import command, launch

    cfg, parent, inputs = cold_start_inputs(tmp_path, profile)
    work = tmp_path / "runs" / profile / "cold_start_sft"
    launcher = LauncherConfig(kind="accelerate", config_file=f"configs/accelerate/{profile}.yaml", num_processes=2,
                              mixed_precision="no")
    argv = command(launcher, work / "request.json")
    assert argv[argv.index("--mixed_precision") + 1] == "no" and argv[argv.index("--num_processes") + 1] == "2"
    result = launch("cold_start_sft", cfg.stage("cold_start_sft"), inputs, launcher)
    metrics = result.train_metrics
    assert metrics["loss"] > 0 and metrics["examples"] == 16, metrics
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

    from posttrain.checkpoint import load_checkpoint
    from posttrain.launcher import launch

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
