"""After kill -9 of a `posttrain run`, no process it started is left alive: not its temporary Prefect
server (flows/server.py), not the math verifier's sympy worker, not a code sandbox.

A run's processes are found two ways: every descendant of the killed process, seen in /proc while
it ran (a sandbox clears its environment), and every process whose environment carries a token set
for this test only (anything the run started, however it was reparented).  A process is named by
(pid, start time), so a pid reused after the kill is not taken for a survivor.  Only the run's own
process is killed (as the OOM killer does), never its process group: what dies after that died
because it was made to die with its parent.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, write_smoke_config
from posttrain.orchestration.liveness import identify

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]  # make test-all and CI run it

TOKEN_ENV = "POSTTRAIN_LEAK_TEST_TOKEN"
GONE_WITHIN_S = 15.0  # a leak is forever; this only bounds the wait for the kernel and the watchers


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[1])


def _descendants(root: int) -> set[tuple[int, int]]:
    """(pid, start ticks) of every live process below ``root``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = _ppid(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            who = identify(child)
            if who is not None:
                found.add((child, who.start_ticks))
                todo.append(child)
    return found


def _carrying(token: str) -> set[tuple[int, int]]:
    """(pid, start ticks) of every live process whose environment holds TOKEN_ENV=token."""
    needle = f"{TOKEN_ENV}={token}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        who = identify(int(entry.name))
        if who is not None and needle in environ.split(b"\0"):
            found.add((int(entry.name), who.start_ticks))
    return found


def _alive(processes: set[tuple[int, int]]) -> set[tuple[int, int]]:
    return {(pid, ticks) for pid, ticks in processes if (now := identify(pid)) and now.start_ticks == ticks}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:300]
    except OSError:
        return "?"


class Watch:
    """The processes of one launch, collected while it runs."""

    def __init__(self, proc: subprocess.Popen, token: str):
        self.proc, self.token, self.seen = proc, token, set()
        self.itself = (proc.pid, identify(proc.pid).start_ticks)
        # Every command line a process was seen with, kept for processes gone by the end: the
        # die-with-parent shim exec's the server under the same pid, so the first one alone may
        # be the shim's.
        self.cmdlines: dict[int, str] = {}

    def look(self) -> set[tuple[int, int]]:
        self.seen |= _descendants(self.proc.pid) | _carrying(self.token)
        self.seen.discard(self.itself)
        for pid, _ in self.seen:
            now, before = _cmdline(pid), self.cmdlines.get(pid, "")
            if now not in ("", "?") and now not in before:
                self.cmdlines[pid] = f"{before} -> {now}" if before else now
            else:
                self.cmdlines.setdefault(pid, now)
        return self.seen

    def kill_and_collect_survivors(self) -> dict[int, str]:
        """kill -9 the launched process alone, then wait for what it started to die."""
        self.look()
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        assert self.proc.returncode == -signal.SIGKILL
        deadline = time.monotonic() + GONE_WITHIN_S
        while (left := _alive(self.seen | _carrying(self.token))) and time.monotonic() < deadline:
            time.sleep(0.2)
        return {pid: _cmdline(pid) for pid, _ in left}

    def cleanup(self) -> None:
        """Kill whatever a failing test leaves behind, so that it does not leak either."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        for pid, _ in _alive(self.seen | _carrying(self.token)):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _wait_for(condition, watch: Watch, log: Path, what: str, timeout: float = 600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        watch.look()
        found = condition()
        if found:
            return found
        if watch.proc.poll() is not None:
            raise AssertionError(f"exited ({watch.proc.returncode}) before {what}:\n{log.read_text()[-4000:]}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-4000:]}")


def _server_of(watch: Watch) -> int | None:
    return next((pid for pid, _ in watch.look() if "prefect.server.api.server:create_app" in _cmdline(pid)), None)


def _env(token: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, TOKEN_ENV: token, "PYTHONUNBUFFERED": "1"}
    for key in ("PREFECT_API_URL", "POSTTRAIN_FAIL_STAGE", "POSTTRAIN_PAUSE_IN_STAGE"):
        env.pop(key, None)
    env.update(extra)
    return env


def test_kill_9_of_a_run_leaves_none_of_its_processes_alive(tmp_path):
    """No PREFECT_API_URL: the run serves its own Prefect API, which must die with it."""
    config = write_smoke_config(tmp_path)
    token = uuid.uuid4().hex
    log = tmp_path / "run.log"
    env = _env(token, PREFECT_HOME=str(tmp_path / "prefect-home"), POSTTRAIN_PAUSE_IN_STAGE="cold_start_sft:600",
               PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180")  # a fresh database on a busy machine
    proc = subprocess.Popen([sys.executable, "-m", "posttrain.cli", "run", "--config", str(config)], cwd=ROOT,
                            env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    watch = Watch(proc, token)
    try:
        # The stage's attempt marker: the flow run exists on the API (the server is up) and a stage runs.
        marker = _wait_for(lambda: next((tmp_path / "runs").glob("*/cold_start_sft/attempt.json"), None),
                           watch, log, "cold_start_sft to start")
        assert json.loads(marker.read_text())["finished"] is None
        assert _server_of(watch), f"no Prefect server among the run's processes: {watch.cmdlines}"
        survivors = watch.kill_and_collect_survivors()
        assert not survivors, f"alive {GONE_WITHIN_S:.0f} s after kill -9 of the run: {survivors}"
    finally:
        watch.cleanup()


# The helpers a reward starts, in a process of their own: the sympy worker (answered a comparison
# only sympy makes) and a sandboxed program that sleeps; then the process is killed.
HELPERS = """
import sys, threading, time
from posttrain.rewards.math import verify_math
from posttrain.rewards.code_judge import run_tests
from posttrain.rewards.code_sandbox import SandboxLimits

for _ in range(300):  # the first calls run out of time while the worker imports sympy
    verdict = verify_math("\\\\boxed{\\\\frac{1}{\\\\sqrt{2}}}", "\\\\frac{\\\\sqrt{2}}{2}")
    if verdict.reward == 1.0:
        break
    time.sleep(0.5)
print("sympy worker:", verdict.reward, verdict.reason, flush=True)
limits = SandboxLimits(isolation=sys.argv[1], cpu_s=600, wall_s=600, total_wall_s=600)
threading.Thread(target=run_tests, args=("import time\\ntime.sleep(600)", [{"input": "", "output": "x"}]),
                 kwargs={"limits": limits}).start()
"""


def _sandbox_modes() -> list:
    from posttrain.rewards.code_sandbox import ISOLATED_MODES, sandbox_info

    unavailable = sandbox_info()["unavailable"]
    return [pytest.param(m, marks=pytest.mark.skipif(m in unavailable, reason=f"{m}: {unavailable.get(m)}"))
            for m in ISOLATED_MODES]


def _sleeping_sandbox(watch: Watch):
    """The sandboxed program, once it sleeps (past its setup: its limits and parent-death signal set)."""
    for pid, _ in watch.seen:
        if " -X utf8 " in _cmdline(pid):
            try:
                if Path(f"/proc/{pid}/wchan").read_text() == "hrtimer_nanosleep":
                    return pid
            except OSError:
                continue
    return None


@pytest.mark.parametrize("mode", _sandbox_modes())
def test_kill_9_of_a_process_kills_its_sympy_worker_and_sandboxes(mode, tmp_path):
    token = uuid.uuid4().hex
    log = tmp_path / "helpers.log"
    proc = subprocess.Popen([sys.executable, "-c", HELPERS, mode], cwd=ROOT, env=_env(token),
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    watch = Watch(proc, token)
    try:
        _wait_for(lambda: "sympy worker: 1.0 match" in log.read_text(), watch, log, "the sympy worker's verdict")
        _wait_for(lambda: _sleeping_sandbox(watch), watch, log, f"the {mode} sandbox's program to sleep")
        worker = [pid for pid, _ in watch.seen if "__math_verifier_worker__" in _cmdline(pid)]
        assert worker, [_cmdline(p) for p, _ in watch.seen]
        survivors = watch.kill_and_collect_survivors()
        assert not survivors, f"alive {GONE_WITHIN_S:.0f} s after kill -9 of their parent: {survivors}"
    finally:
        watch.cleanup()



def test_resume_stops_its_server_at_exit_and_when_killed(tmp_path):
    """`posttrain resume` without PREFECT_API_URL serves its own API too: gone after a normal exit
    (here: the flow run is looked up there and not found), and after kill -9 while it starts."""
    home = tmp_path / "prefect-home"
    missing = str(uuid.uuid4())

    def launch(log: Path) -> Watch:
        token = uuid.uuid4().hex
        env = _env(token, PREFECT_HOME=str(home), PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180")
        proc = subprocess.Popen([sys.executable, "-m", "posttrain.cli", "resume", missing], cwd=ROOT, env=env,
                                stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
        return Watch(proc, token)

    log = tmp_path / "resume.log"
    watch = launch(log)
    try:
        while watch.proc.poll() is None:
            watch.look()
            time.sleep(0.1)
        said = log.read_text()
        assert watch.proc.returncode == 2 and f"error: flow run {missing} not found on the Prefect API" in said, said
        assert any("prefect.server.api.server:create_app" in c for c in watch.cmdlines.values()), watch.cmdlines
        assert not _alive(watch.seen | _carrying(watch.token)), "a process of the command outlived it"
    finally:
        watch.cleanup()

    log = tmp_path / "resume-killed.log"
    watch = launch(log)
    try:
        _wait_for(lambda: _server_of(watch), watch, log, "resume's Prefect server to start")
        survivors = watch.kill_and_collect_survivors()
        assert not survivors, f"alive {GONE_WITHIN_S:.0f} s after kill -9 of resume: {survivors}"
    finally:
        watch.cleanup()


def test_a_server_that_does_not_come_up_is_a_clear_error(tmp_path):
    """A database the server cannot open: `posttrain run` stops before any work with one error line
    saying so, and leaves no process behind."""
    config = write_smoke_config(tmp_path)
    token = uuid.uuid4().hex
    env = _env(token, PREFECT_HOME=str(tmp_path / "prefect-home"),
               PREFECT_SERVER_DATABASE_CONNECTION_URL=f"sqlite+aiosqlite:///{tmp_path}/missing/dir/prefect.db")
    log = tmp_path / "run.log"
    proc = subprocess.Popen([sys.executable, "-m", "posttrain.cli", "run", "--config", str(config)], cwd=ROOT,
                            env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    watch = Watch(proc, token)
    try:
        while proc.poll() is None:
            watch.look()
            time.sleep(0.1)
        last = log.read_text().strip().splitlines()[-1]
        assert proc.returncode == 2, log.read_text()[-3000:]
        assert last.startswith("error: the temporary Prefect server exited with code ") and \
            "set PREFECT_API_URL to use a running server instead" in last, last
        assert not (tmp_path / "runs").exists()  # nothing ran
        assert not _alive(watch.seen | _carrying(token))
    finally:
        watch.cleanup()
