"""Runs a training stage in the caller's process, or as a multi-process job under `accelerate
launch` or `torchrun` (the peers' launchers; nothing home-made schedules processes).

A launched job runs `python -m stages <request.json>` in every process: the request holds the stage
name, its typed config and its inputs; every rank runs the stage function and the first writes the
StageResult that the caller reads back. A rank that raises leaves its traceback beside the request,
so the stage fails with that rank's error; a rank killed by a signal is named from the launcher's
report; a job that outlives `timeout_s` (a hung rank) is killed as a process group.
"""
from __future__ import annotations

import collections
import json
import os
import re
import signal
import socket
import subprocess
import sys
import traceback
from pathlib import Path

from posttrain.schema import StageInputs, StageResult
from posttrain.config.trainers import LauncherConfig

REQUEST, RESULT, RANK_ERROR = "request.json", "result.json", "error-rank{rank}.txt"
ROOT = Path(__file__).resolve().parents[2]


class StageLaunchFailed(RuntimeError):
    pass


def launch(name: str, stage_config, inputs: StageInputs, launcher: LauncherConfig) -> StageResult:
    if launcher.kind == "in_process":
        import importlib

        return importlib.import_module(f"stages.{name}").run(stage_config, inputs)
    job = Path(inputs.work_dir) / "launch"
    job.mkdir(parents=True, exist_ok=True)
    for stale in [job / RESULT, *job.glob("error-rank*.txt")]:
        stale.unlink(missing_ok=True)
    request = job / REQUEST
    request.write_text(json.dumps({"stage": name, "config": stage_config.model_dump(mode="json"),
                                   "inputs": inputs.model_dump(mode="json")}))
    argv = command(launcher, request)
    print(f"{name}: launching {launcher.num_processes} processes: {' '.join(argv)}", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    tail: collections.deque[str] = collections.deque(maxlen=60)
    process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, errors="replace", start_new_session=True)
    try:
        _relay(process, tail, launcher.timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        raise StageLaunchFailed(f"{name}: the {launcher.kind} job did not finish within {launcher.timeout_s:.0f} s "
                                f"(launcher.timeout_s; a hung rank?); it was killed. Last output:\n"
                                + "".join(list(tail)[-15:])) from None
    except BaseException:
        _kill_group(process)
        raise
    result = job / RESULT
    if process.returncode == 0 and result.is_file():
        return StageResult.model_validate_json(result.read_text())
    raise StageLaunchFailed(failure_message(name, launcher, process.returncode, job, "".join(tail)))


def command(launcher: LauncherConfig, request: Path) -> list[str]:
    entry = ["-m", "stages", str(request)]
    if launcher.kind == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
                "--nproc-per-node", str(launcher.num_processes), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", *entry]
    config_file = Path(launcher.config_file)
    config_file = config_file if config_file.is_absolute() else ROOT / config_file
    precision = ["--mixed_precision", launcher.mixed_precision] if launcher.mixed_precision else []
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config_file),
            "--num_processes", str(launcher.num_processes), *precision, "--main_process_port", str(_free_port()),
            *entry]


def failure_message(name: str, launcher: LauncherConfig, code: int | None, job: Path, output: str) -> str:
    """The root cause: a rank the launcher saw die by a signal (the others then fail on the broken
    connection); else the first rank that raised, with its own error; else the launcher's output."""
    # torch.distributed.run: the agent's line for the first failure it observed, then its summary
    died = [(rank, exit_code) for exit_code, rank in re.findall(r"exitcode:\s*(-?\d+)\)\s*local_rank:\s*(\d+)", output)]
    died += re.findall(r"rank\s*:\s*(\d+)[^\[]*?exitcode\s*:\s*(-?\d+)", output)
    signalled = [(rank, int(exit_code)) for rank, exit_code in died if int(exit_code) < 0]
    if signalled:
        rank, exit_code = signalled[0]
        return (f"{name}: rank {rank} of {launcher.num_processes} died (killed by signal "
                f"{signal.Signals(-exit_code).name}) without a Python error; the job stopped (launcher exit code "
                f"{code}). A rerun resumes from the last in-stage checkpoint.")
    errors = sorted(job.glob("error-rank*.txt"), key=lambda path: path.stat().st_mtime)
    if errors:
        rank = re.search(r"rank(\d+)", errors[0].name).group(1)
        text = errors[0].read_text().strip().splitlines()
        return f"{name}: rank {rank} of {launcher.num_processes} failed: {text[-1]}\n" + "\n".join(text[-12:])
    if died:
        rank, exit_code = died[0]
        return f"{name}: rank {rank} of {launcher.num_processes} exited with code {exit_code} (launcher exit code {code})"
    return f"{name}: the {launcher.kind} job failed (exit code {code}) with no result. Last output:\n" + output[-3000:]


def run_launched(request_path: str) -> int:
    """One process of a launched stage (`python -m stages`): run the stage; rank 0 writes the result."""
    import importlib

    from posttrain.config.pipeline import STAGE_CONFIGS

    request = json.loads(Path(request_path).read_text())
    name = request["stage"]
    rank = int(os.environ.get("RANK", "0"))
    job = Path(request_path).parent
    try:
        config = STAGE_CONFIGS[name].model_validate(request["config"])
        inputs = StageInputs.model_validate(request["inputs"])
        result = importlib.import_module(f"stages.{name}").run(config, inputs)
    except BaseException:
        (job / RANK_ERROR.format(rank=rank)).write_text(traceback.format_exc())
        raise
    if rank == 0:
        tmp = job / (RESULT + ".tmp")
        tmp.write_text(result.model_dump_json())
        tmp.replace(job / RESULT)
    return 0


def _relay(process: subprocess.Popen, tail: collections.deque, timeout_s: float) -> None:
    """Copy the job's output to ours as it comes (progress bars included), keeping the last lines."""
    import threading

    def pump():
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            tail.append(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    process.wait(timeout=timeout_s)
    reader.join(timeout=10)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
