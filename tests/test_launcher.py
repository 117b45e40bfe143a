"""Stages as multi-process jobs: accelerate / torchrun command lines, launcher settings refused at
load, the failing rank named; end to end (slow): cold-start SFT and reasoning RL under torchrun, 2
CPU processes each (gloo), the pipeline carrying on with their checkpoints, and a rank killed
mid-stage failing the stage, a rerun resuming from the last in-stage checkpoint; the shipped `ddp`
and `fsdp` accelerate profiles launched as they are (accelerate starts their processes with
torchrun; only a MULTI_CPU profile would need mpirun, which these machines lack)."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, config_error, write_smoke_config
from posttrain.config.loading import load_config
from posttrain.training.launcher import StageLaunchFailed, command, failure_message
from posttrain.config.trainers import LauncherConfig


@pytest.mark.parametrize("stage, launcher, words", [
    ("cold_start_sft", "{kind: accelerate, num_processes: 2}", "needs config_file"),
    ("cold_start_sft", "{num_processes: 2}", "needs kind accelerate or torchrun"),
    ("cold_start_sft", "{config_file: configs/accelerate/fsdp.yaml}", "(FSDP) is started by accelerate launch"),
    ("general_rl", "{kind: accelerate, config_file: configs/accelerate/zero3.yaml, num_processes: 2}",
     "scripts/install.py --engines gpu"),
    ("general_rl", "{kind: accelerate, config_file: configs/accelerate/nowhere.yaml}", "does not exist"),
    ("mode_fusion_sft", "{kind: torchrun, num_processes: 2}", "writes its dataset to the data store"),
    ("cold_start_sft", "{kind: accelerate, config_file: MULTI_CPU_CONFIG, num_processes: 2}", "use kind torchrun"),
    ("reasoning_rl", "{kind: accelerate, config_file: configs/accelerate/fsdp.yaml, num_processes: 2}",
     "set trainer.monitor_kl: false"),
])
def test_launcher_settings_that_cannot_work_are_refused_at_load(tmp_path, stage, launcher, words):
    cpu = tmp_path / "cpu.yaml"
    cpu.write_text("distributed_type: MULTI_CPU\nuse_cpu: true\n")
    launcher = launcher.replace("MULTI_CPU_CONFIG", str(cpu))
    message = config_error(tmp_path, f"name: t\nstages:\n  {stage}:\n    launcher: {launcher}\n")
    assert f"stages.{stage}" in message and words in message, message


def test_the_adaptive_sampler_is_refused_across_processes(tmp_path):
    message = config_error(tmp_path, "name: t\nstages:\n  reasoning_rl:\n    sampling: {strategy: prioritized}\n"
                               "    launcher: {kind: torchrun, num_processes: 2}\n")
    assert "success statistics per process" in message


def test_lora_with_sharded_weights_is_refused(tmp_path):
    message = config_error(tmp_path, "name: t\nstages:\n  cold_start_sft:\n    trainer: {lora: {r: 4}}\n"
                               "    launcher: {kind: accelerate, config_file: configs/accelerate/fsdp.yaml, num_processes: 2}\n")
    assert "needs the whole model in one process" in message


def test_command_lines_are_the_peers_launchers(tmp_path):
    request = tmp_path / "request.json"
    torchrun = command(LauncherConfig(kind="torchrun", num_processes=4), request)
    assert torchrun[1:3] == ["-m", "torch.distributed.run"] and "--nproc-per-node" in torchrun
    assert torchrun[torchrun.index("--nproc-per-node") + 1] == "4" and torchrun[-3:] == ["-m", "stages", str(request)]
    accelerate = command(LauncherConfig.model_construct(kind="accelerate", config_file="configs/accelerate/ddp.yaml",
                                                        num_processes=2), request)
    assert accelerate[1:3] == ["-m", "accelerate.commands.launch"]
    assert accelerate[accelerate.index("--config_file") + 1] == str(ROOT / "configs/accelerate/ddp.yaml")
    engines = {name: yaml.safe_load((ROOT / "configs" / "accelerate" / f"{name}.yaml").read_text())["distributed_type"]
               for name in ("ddp", "zero2", "zero3", "fsdp")}
    assert engines == {"ddp": "MULTI_GPU", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED", "fsdp": "FSDP"}


def test_the_failing_ranks_error_is_the_stages_error(tmp_path):
    launcher = LauncherConfig(kind="torchrun", num_processes=2)
    (tmp_path / "error-rank1.txt").write_text("Traceback (most recent call last):\n  ...\nValueError: bad row 7\n")
    message = failure_message("cold_start_sft", launcher, 1, tmp_path, "")
    assert message.startswith("cold_start_sft: rank 1 of 2 failed: ValueError: bad row 7")
    (tmp_path / "error-rank1.txt").unlink()
    torchrun_report = ("[1]:\n  time      : 2026-12-01_03:00:00\n  host      : h\n  rank      : 1 (local_rank: 1)\n"
                       "  exitcode  : -9 (pid: 4242)\n  error_file: <N/A>\n")
    message = failure_message("reasoning_rl", launcher, 1, tmp_path, torchrun_report)
    assert "rank 1 of 2 died (killed by signal SIGKILL)" in message and "resumes from the last in-stage checkpoint" in message
    # the survivor's error (a broken connection) is a consequence: the killed rank is the cause
    (tmp_path / "error-rank0.txt").write_text("RuntimeError: gloo Connection reset by peer\n")
    assert "rank 1 of 2 died" in failure_message("reasoning_rl", launcher, 1, tmp_path,
                                                 "failed (exitcode: -9) local_rank: 1 (pid: 13903) of binary: python")


# ----------------------------------------------------------------------------- end to end, 2 processes

LAUNCHED = {
    "cold_start_sft": {"kind": "torchrun", "num_processes": 2},
    "reasoning_rl": {"kind": "torchrun", "num_processes": 2},
}


def _two_process_project(root: Path, **reasoning_trainer) -> Path:
    config = write_smoke_config(root, cold_start_sft={"threads": 1, "batch_size": 8},
                                reasoning_rl={"threads": 1, "prompts_per_step": 2, "num_generations": 2,
                                              **reasoning_trainer})
    cfg = yaml.safe_load(config.read_text())
    for stage, launcher in LAUNCHED.items():
        cfg["stages"][stage]["launcher"] = launcher
    config.write_text(yaml.safe_dump(cfg))
    return config


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_two_process_stages_and_the_chain_carries_on(tmp_path, monkeypatch):
    from prefect.testing.utilities import prefect_test_harness

    from flows.pipeline import pipeline

    config = _two_process_project(tmp_path)
    with prefect_test_harness(server_startup_timeout=120):
        state = pipeline(config_path=str(config), stages=["cold_start_sft", "reasoning_rl", "rejection_sampling"],
                         return_state=True)
    assert state.is_completed(), state.message
    report = json.loads(next((tmp_path / "runs").glob("*/report.json")).read_text())
    stages = {s["name"]: s for s in report["stages"]}
    run_dir = next((tmp_path / "runs").glob("*/report.json")).parent
    for name in LAUNCHED:
        assert stages[name]["status"] == "passed", name
        result = json.loads((run_dir / name / "launch" / "result.json").read_text())
        assert result["checkpoint"]["digest"] == stages[name]["checkpoint"]["digest"]
    # reasoning RL trained from the 2-process cold start's checkpoint, rejection sampling from RL's
    rl = json.loads((run_dir / "reasoning_rl" / "launch" / "result.json").read_text())
    assert rl["parent"]["digest"] == stages["cold_start_sft"]["checkpoint"]["digest"]
    assert stages["rejection_sampling"]["status"] == "passed"
    states = sorted((run_dir / "reasoning_rl" / "trainer").glob("checkpoint-*/problem_sampler.rank*.json"))
    assert {p.name for p in states} >= {"problem_sampler.rank0.json", "problem_sampler.rank1.json"}


def _rank_pid(rank: int, request: Path) -> int | None:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(request).encode() in cmdline and f"RANK={rank}".encode() in environ and b"-m" in cmdline:
            if b"stages" in cmdline and b"torch.distributed.run" not in cmdline and b"accelerate.commands.launch" not in cmdline:
                return int(proc.name)
    return None


def launch_killing_rank_1(stage, inputs, work: Path, request: Path) -> tuple[list[int], StageLaunchFailed]:
    """Launch a 2-process reasoning RL stage and SIGKILL its rank 1 once the first in-stage checkpoint
    (checkpoint-2) is written: (the pids killed, the stage's failure). Stops watching if the stage
    ends on its own first."""
    from posttrain.training.launcher import launch

    killed: list[int] = []
    ended = threading.Event()

    def kill_rank_1():
        deadline = time.time() + 900
        while time.time() < deadline and not killed and not ended.is_set():
            if any(work.glob("trainer/checkpoint-2/trainer_state.json")):
                if pid := _rank_pid(1, request):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.02)

    killer = threading.Thread(target=kill_rank_1, daemon=True)
    killer.start()
    with pytest.raises(StageLaunchFailed) as failed:
        try:
            launch("reasoning_rl", stage, inputs, stage.launcher)
        finally:
            ended.set()
    killer.join()
    return killed, failed.value


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_killed_rank_fails_the_stage_and_a_rerun_resumes(tmp_path):
    """Reasoning RL as a 2-process torchrun job; rank 1 is killed after the first in-stage
    checkpoint: the stage fails naming rank 1 and SIGKILL; the rerun starts from that checkpoint."""
    from posttrain.training.launcher import launch
    from posttrain.data.prepared import prepare
    from posttrain.schema import StageInputs
    from posttrain.world.build import base_checkpoint, ensure_world

    # Steps of the smoke model take ~0.07 s on a fast host: 6 steps ended before the kill landed. With
    # 40, the rank is killed while dozens of steps are left, on any host.
    config = _two_process_project(tmp_path, max_steps=40, save_steps=2)
    cfg = load_config(config)
    ensure_world(cfg)
    data = prepare(cfg, tmp_path / "runs" / "prepared", ("reasoning_rl",))
    work = tmp_path / "runs" / "kill" / "reasoning_rl"
    inputs = StageInputs(parent=base_checkpoint(cfg), work_dir=str(work), seed=0, model=cfg.base.settings(),
                         data=data.for_stage("reasoning_rl"), data_store=str(cfg.path(cfg.paths.data_store)),
                         dvc_remote=str(cfg.path(cfg.paths.dvc_remote)))
    stage = cfg.stage("reasoning_rl")
    request = work / "launch" / "request.json"
    killed, failed = launch_killing_rank_1(stage, inputs, work, request)
    assert killed, f"rank 1 was never killed; the stage ended with: {failed}"
    assert "rank 1 of 2" in str(failed) and "SIGKILL" in str(failed), str(failed)
    assert not (work / "launch" / "result.json").exists()

    left = sorted(work.glob("trainer/checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert left, "the killed run left no in-stage checkpoint"
    result = launch("reasoning_rl", stage, inputs, stage.launcher)
    assert result.policies["resumed_from"] == str(left[-1]), (result.policies, left)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("profile", ["ddp", "fsdp"])
def test_the_shipped_accelerate_profiles_run_on_cpu(tmp_path, profile):
    """`accelerate launch` with configs/accelerate/<profile>.yaml as shipped, 2 processes on CPU:
    accelerate starts them with torchrun (its multi-GPU launcher), the Trainer, seeing no GPU, joins
    them over gloo; cold-start SFT trains and its checkpoint loads as the whole model. On CPU
    accelerate wraps the model in DDP even under the FSDP profile (it takes the FSDP path only for
    accelerator devices, accelerate/state.py), so this checks the profile's launch, not sharding."""
    import torch

    from conftest import cold_start_inputs
    from posttrain.registry.checkpoint import load_checkpoint
    from posttrain.training.launcher import launch

    cfg, parent, inputs = cold_start_inputs(tmp_path, profile)
    launcher = LauncherConfig(kind="accelerate", config_file=f"configs/accelerate/{profile}.yaml", num_processes=2)
    result = launch("cold_start_sft", cfg.stage("cold_start_sft"), inputs, launcher)
    rows = inputs.data["cold_start"].rows
    assert rows and result.train_metrics["loss"] > 0 and result.train_metrics["examples"] == rows, result.train_metrics
    model, _ = load_checkpoint(result.checkpoint, for_training=False)
    base, _ = load_checkpoint(parent, for_training=False)
    trained, before = dict(model.named_parameters()), dict(base.named_parameters())
    assert {n: p.shape for n, p in trained.items()} == {n: p.shape for n, p in before.items()}
    assert any(not torch.equal(p, before[n]) for n, p in trained.items()), "the checkpoint is the base model"
