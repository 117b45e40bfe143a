"""The caller's side of the sympy worker: one persistent subprocess per process (started in the
background, so sympy is never imported in the caller), asked one equality at a time, killed and
respawned when a request overruns its budget, and paused for a while after repeated start failures.
The program that runs inside the subprocess is worker_process.py."""
from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time

from posttrain.rewards.math.limits import Deadline, Timeout

WORKER_CALL_S = 0.6  # one sympy request


class SympyWorker:
    """The one worker of this process (a forked child starts its own: ``owner`` is the pid that
    spawned ``proc``); ``equal`` is serialised by ``lock``."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.owner = 0
        self.ready = False
        self.buf = b""
        self.lock = threading.Lock()
        self.stale_since: float | None = None
        self.failures = 0
        self.disabled_until = 0.0

    def _alive(self) -> bool:
        return self.proc is not None and self.owner == os.getpid() and self.proc.poll() is None

    def start(self) -> None:
        """Spawn the worker if none is running (non-blocking: sympy imports in the background)."""
        if self._alive():
            return
        if self.proc is not None and self.owner == os.getpid():
            self._kill()
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker_process.py")
        code = (
            "import sys; sys.path.pop(0); import runpy; "
            f"runpy.run_path({path!r}, run_name='__math_verifier_worker__')"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        self.owner = os.getpid()
        self.ready = False
        self.buf = b""
        self.stale_since = None

    def _kill(self) -> None:
        p = self.proc
        self.proc = None
        self.ready = False
        self.buf = b""
        self.stale_since = None
        if p is None or self.owner != os.getpid():
            return
        try:
            p.kill()
            p.wait(timeout=2)
        except Exception:
            pass
        for f in (p.stdin, p.stdout):
            try:
                f.close()  # type: ignore[union-attr]
            except Exception:
                pass

    def _readline(self, deadline: Deadline) -> bytes:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline.left()
            if left <= 0:
                raise Timeout()
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                raise Timeout()
            chunk = os.read(fd, 65536)
            if not chunk:
                raise BrokenPipeError("worker exited")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def _restart(self) -> None:
        self._kill()
        self.start()  # warm replacement for the next request

    def _startup_failed(self) -> None:
        self._kill()
        self.failures += 1
        if self.failures >= 3:  # e.g. sympy missing: stop respawning for a while
            self.failures = 0
            self.disabled_until = time.monotonic() + 60.0
        else:
            self.start()

    def equal(self, a, b, deadline: Deadline) -> bool | None:
        """True/False; None when sympy failed on the input; raises Timeout."""
        if not self.lock.acquire(timeout=max(0.0, deadline.left())):
            raise Timeout()
        try:
            if time.monotonic() < self.disabled_until:
                raise Timeout()
            self.start()
            if not self.ready:
                try:
                    line = self._readline(deadline)
                except BrokenPipeError:
                    self._startup_failed()
                    raise Timeout()
                if line != b"ready":
                    self._startup_failed()
                    raise Timeout()
                self.ready = True
                self.failures = 0
            if self.stale_since is not None:  # drop the answer a previous caller gave up on
                try:
                    self._readline(deadline)
                    self.stale_since = None
                except Timeout:
                    if time.monotonic() - self.stale_since > WORKER_CALL_S:
                        self._restart()  # that request is a runaway
                    raise
                except BrokenPipeError:
                    self._restart()
                    raise Timeout()
            full_budget = deadline.left() >= WORKER_CALL_S
            call = Deadline(min(WORKER_CALL_S, max(0.0, deadline.left())))
            sent = time.monotonic()
            try:
                assert self.proc is not None and self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"a": a, "b": b}).encode() + b"\n")
                self.proc.stdin.flush()
                line = self._readline(call)
            except Timeout:
                if full_budget:
                    self._restart()  # sympy overran its own budget: kill it
                else:
                    self.stale_since = sent  # the caller's budget ran out first: keep the worker
                raise
            except (BrokenPipeError, OSError, ValueError):
                self._restart()
                raise Timeout()
            resp = json.loads(line)
            return resp.get("r")
        finally:
            self.lock.release()

    def shutdown(self) -> None:
        with self.lock:
            self._kill()


WORKER = SympyWorker()
atexit.register(WORKER.shutdown)


def prestart_worker() -> None:
    """Start the sympy worker in the background (optional; it is started on demand anyway)."""
    try:
        if WORKER.lock.acquire(blocking=False):
            try:
                WORKER.start()
            finally:
                WORKER.lock.release()
    except Exception:  # pragma: no cover
        pass
