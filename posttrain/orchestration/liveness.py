"""Which process runs a flow run, and is it still alive?

kill -9 (the OOM killer, a lost machine) ends a `posttrain run` process without a word to the Prefect
API: its flow run stays RUNNING forever, the UI offers no Retry and `posttrain resume` used to refuse
it.  A served deployment's runner watches its child and reports the crash; `posttrain run` executes
the flow in its own process and has no such watcher.  So every pipeline attempt records, in its run
folder, the process that runs it:

    runs/<run_id>/process.json   {"process": {"host", "pid", "boot_id", "start_ticks"},
                                  "attempt", "started", "ended", "error"}

``attempt`` is the id of the flow run's RUNNING state that this process holds, so a record left by an
earlier attempt is never taken for the current one; ``ended`` (and ``error``) are set when the flow
function returns or raises, never after a kill: that is how `posttrain status` tells a finished run
from an interrupted one.

A pid alone proves nothing: the kernel reuses pids.  (pid, start time) names one process for the life
of a boot: ``start_ticks`` is field 22 of /proc/<pid>/stat, the start time in clock ticks since boot
(proc(5)); ``boot_id`` (/proc/sys/kernel/random/boot_id) tells boots apart, because ticks restart at
0 after a reboot.  No Prefect import here: flows/pipeline.py writes the record, `posttrain status` and flows/commands.py (resume) read it.
"""
from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ValidationError

RECORD_FILE = "process.json"
_PROC = Path("/proc")


class ProcessIdentity(BaseModel):
    """One process for the life of a boot (start_ticks / boot_id are None where /proc is missing)."""

    host: str
    pid: int
    boot_id: str | None = None
    start_ticks: int | None = None

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


class RunProcess(BaseModel):
    """The record in a run folder: which process runs (ran) the attempt, and whether it ended."""

    process: ProcessIdentity
    attempt: str | None = None
    started: str
    ended: str | None = None
    error: str | None = None  # the exception the run ended with, if any ("GateFailed: ...")


def _boot_id() -> str | None:
    try:
        return (_PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return None


def identify(pid: int) -> ProcessIdentity | None:
    """The process with this pid on this machine now; None when there is none, or only a zombie
    (it has exited and waits for its parent to reap it: dead, though its pid still shows)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces or ')': split after
    # the last ')'; what follows starts with field 3 (state), so field 22 (starttime) is index 19.
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return ProcessIdentity(host=socket.gethostname(), pid=pid, boot_id=_boot_id(), start_ticks=int(fields[19]))


def this_process() -> ProcessIdentity:
    return identify(os.getpid()) or ProcessIdentity(host=socket.gethostname(), pid=os.getpid())


def is_alive(process: ProcessIdentity) -> bool | None:
    """True: that very process still runs.  False: provably gone (no such pid, a zombie, or the pid
    now names a process started at another time or in another boot).  None: cannot tell from here
    (another host, or no /proc to read start times from)."""
    if process.host != socket.gethostname() or process.start_ticks is None or not _PROC.is_dir():
        return None
    now = identify(process.pid)
    return now is not None and now.start_ticks == process.start_ticks and now.boot_id == process.boot_id


def read_record(run_dir: Path) -> RunProcess | None:
    try:
        return RunProcess.model_validate_json((Path(run_dir) / RECORD_FILE).read_text())
    except (OSError, ValidationError):
        return None


def _write(run_dir: Path, record: RunProcess) -> None:
    tmp = run_dir / f".{RECORD_FILE}.{uuid.uuid4().hex[:8]}"  # rename: a reader never sees half a record
    tmp.write_text(record.model_dump_json(indent=2))
    os.replace(tmp, run_dir / RECORD_FILE)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@contextlib.contextmanager
def running_process(run_dir: Path, attempt: str | None) -> Iterator[RunProcess]:
    """Record this process as the one running ``attempt`` in ``run_dir``; mark the record ended when
    the block exits, normally or by an exception (a kill -9 leaves it unended: that is the point)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    record = RunProcess(process=this_process(), attempt=attempt, started=_now())
    _write(run_dir, record)
    error = None
    try:
        yield record
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        _write(run_dir, record.model_copy(update={"ended": _now(), "error": error}))
