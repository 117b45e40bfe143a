"""Helper processes that die with the command that started them, and the Prefect API server of one
`posttrain run` / `posttrain resume`.

Without PREFECT_API_URL, Prefect's client starts a temporary ("ephemeral") API server as a child
process and stops it from an atexit hook. kill -9, the OOM killer or a lost job never runs that
hook: the server (uvicorn) outlives the run forever, one more per killed run. Here the command
starts that server itself, on 127.0.0.1 and a free port, as a child that the kernel kills when the
command dies however it dies (Linux PR_SET_PDEATHSIG), waits for its health check, points
PREFECT_API_URL at it, and stops it at a normal exit once Prefect's log and event workers have
flushed. Its database is the one Prefect's own temporary server uses (under PREFECT_HOME), so
`make ui` still shows the runs.

PR_SET_PDEATHSIG is set by a tiny exec shim in the child rather than a ``preexec_fn``: preexec_fn
is unsafe in a process that has threads, and this one has (Prefect, torch).  The signal fires when
the *thread* that forked the child ends: start these children from the main thread.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

STARTUP_TIMEOUT_S = 120.0  # a migration of a fresh database on a loaded 2-core machine takes a while
STOP_TIMEOUT_S = 10.0

# argv: <expected parent pid> <program> <args...>.  The parent-pid check closes the race where the
# parent dies between fork and prctl (the child would then never get the signal).
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0:\n"  # 1 = PR_SET_PDEATHSIG
    "    sys.exit('PR_SET_PDEATHSIG failed: ' + os.strerror(ctypes.get_errno()))\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(0)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


class ServerError(RuntimeError):
    """The temporary Prefect server did not come up."""


def die_with_parent(argv: list[str]) -> list[str]:
    """``argv`` wrapped so that the process it starts is SIGKILLed when this process dies (Linux);
    elsewhere ``argv`` unchanged.  The program must be a path (execv does not search PATH)."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    return [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT, str(os.getpid()), *argv]


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _bindable(port: int) -> bool:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        try:
            sock.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def healthy(api_url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


class PrefectServer:
    """The Prefect API server Prefect itself would start for this process (uvicorn on the server's
    app factory, UI off, the current settings in its environment), as a die-with-parent child."""

    def __init__(self, port: int | None = None):
        self.port = port
        self.process: subprocess.Popen | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def _spawn(self) -> subprocess.Popen:
        import prefect
        from prefect.settings import get_current_settings

        argv = [sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent),
                "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1",
                "--port", str(self.port), "--log-level", "error", "--lifespan", "on"]
        env = {**os.environ, **get_current_settings().to_environment_variables(exclude_unset=True),
               "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1",
               "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
        env.pop("PREFECT_API_URL", None)
        return subprocess.Popen(die_with_parent(argv), env=env, stdin=subprocess.DEVNULL)

    def start(self, timeout: float | None = None) -> str:
        """Start the server and wait until /api/health answers; its API URL.  A port taken in the
        meantime (the server exits at once) is retried on another; anything else is a ServerError.
        ``timeout``: by default the longer of STARTUP_TIMEOUT_S and Prefect's own setting for its
        temporary server (PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)."""
        if timeout is None:
            from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS

            timeout = max(STARTUP_TIMEOUT_S, float(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()))
        chosen = self.port
        deadline = time.monotonic() + timeout
        for _ in range(3):
            self.port = chosen or free_port()
            self.process = self._spawn()
            while time.monotonic() < deadline:
                if healthy(self.api_url) and self.process.poll() is None:  # ours, not one that took the port
                    return self.api_url
                if self.process.poll() is not None:
                    break
                time.sleep(0.2)
            code = self.process.poll()
            if code is None:
                self.stop()
                raise ServerError(f"the temporary Prefect server on 127.0.0.1:{self.port} did not answer "
                                  f"{self.api_url}/health within {timeout:.0f} s (its output is above); "
                                  "set PREFECT_API_URL to use a running server instead")
            if chosen is not None or time.monotonic() >= deadline or _bindable(self.port):
                break  # not a port taken by another process between free_port() and the bind
        raise ServerError(f"the temporary Prefect server exited with code {self.process.returncode} before "
                          f"answering on 127.0.0.1:{self.port} (its output is above); set PREFECT_API_URL "
                          "to use a running server instead")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _drain_prefect_workers() -> None:
    """Send the logs and events still queued in this process before their server goes away."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for drain in (lambda: APILogWorker.instance().drain(), EventsWorker.drain_all):
        try:
            drain()
        except Exception:  # noqa: BLE001 - a worker never started, or the server already gone
            pass


@contextlib.contextmanager
def prefect_api() -> Iterator[str]:
    """The Prefect API this command talks to: the configured PREFECT_API_URL (environment or
    profile), else a temporary server owned by this process (see the module docstring)."""
    import prefect.context
    from prefect.settings import PREFECT_API_URL, temporary_settings

    configured = PREFECT_API_URL.value()
    if configured:
        yield configured
        return
    server = PrefectServer()
    url = server.start()
    previous = os.environ.get("PREFECT_API_URL")
    # The environment for threads that start with no settings context (Prefect's log and event
    # workers fall back to the global context, refreshed from it) and for child processes.
    os.environ["PREFECT_API_URL"] = url
    prefect.context.refresh_global_settings_context()
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            try:
                yield url
            finally:
                _drain_prefect_workers()
    finally:
        server.stop()
        if previous is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = previous
        prefect.context.refresh_global_settings_context()
