"""posttrain/orchestration/liveness.py: is the process a run recorded still alive?  A pid alone is not enough:
a dead process's pid is reused, so the record's start time must match too."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from posttrain.orchestration import liveness


@pytest.fixture
def child():
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2]


def test_a_live_process_is_alive(child):
    assert liveness.is_alive(liveness.this_process()) is True
    assert liveness.is_alive(liveness.identify(child.pid)) is True


def test_a_dead_process_is_gone(child):
    identity = liveness.identify(child.pid)
    child.kill()
    # Not reaped yet: a zombie still shows its pid in /proc, but it is dead.
    deadline = time.monotonic() + 10
    while _state(child.pid) != "Z":
        assert time.monotonic() < deadline, f"child state {_state(child.pid)!r}"
        time.sleep(0.01)
    assert liveness.identify(child.pid) is None
    assert liveness.is_alive(identity) is False
    child.wait()  # reaped: the pid is free
    assert liveness.is_alive(identity) is False


def test_a_recycled_pid_is_not_the_recorded_process(child):
    now = liveness.identify(child.pid)
    # The record of an earlier process that had this pid: same pid, another start time (or boot).
    earlier = now.model_copy(update={"start_ticks": now.start_ticks - 1})
    assert liveness.is_alive(earlier) is False
    assert liveness.is_alive(now.model_copy(update={"boot_id": "another-boot"})) is False
    assert liveness.is_alive(now) is True


def test_another_host_cannot_be_checked_from_here(child):
    elsewhere = liveness.identify(child.pid).model_copy(update={"host": "not-" + liveness.this_process().host})
    assert liveness.is_alive(elsewhere) is None


def test_a_command_name_with_spaces_and_parentheses_is_parsed(tmp_path):
    # /proc/<pid>/stat puts the command name in parentheses, unescaped: split after the last ')'.
    odd = tmp_path / "a) b (c"
    odd.symlink_to(shutil.which("sleep"))
    proc = subprocess.Popen([str(odd), "60"])
    try:
        identity = liveness.identify(proc.pid)
        # The right field: psutil's create time is boot time + the same ticks (proc(5) field 22).
        import psutil

        started = psutil.boot_time() + identity.start_ticks / os.sysconf("SC_CLK_TCK")
        assert abs(started - psutil.Process(proc.pid).create_time()) < 1.0
        assert liveness.is_alive(identity) is True
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_the_run_record_names_this_process_and_is_ended_on_exit(tmp_path):
    run_dir = tmp_path / "runs" / "run-1"
    with liveness.running_process(run_dir, attempt="state-1"):
        record = liveness.read_record(run_dir)
        assert record.process == liveness.this_process() and record.attempt == "state-1"
        assert record.ended is None  # what a kill -9 leaves: an unended record
    record = liveness.read_record(run_dir)
    assert record.ended is not None and record.error is None

    with pytest.raises(RuntimeError), liveness.running_process(run_dir, attempt="state-2"):
        raise RuntimeError("gate of cold_start_sft failed")
    record = liveness.read_record(run_dir)
    assert record.ended and record.error == "RuntimeError: gate of cold_start_sft failed"
    assert sorted(p.name for p in run_dir.iterdir()) == [liveness.RECORD_FILE]  # no temporary file left

    (run_dir / liveness.RECORD_FILE).write_text('{"process": ')  # cut off: read as no record
    assert liveness.read_record(run_dir) is None
    assert liveness.read_record(tmp_path / "nowhere") is None
