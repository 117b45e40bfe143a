"""OS isolation for untrusted code: which kind this machine gives (`sandbox_mode()`, probed once),
the refusal to run code without it (`require_isolation`), what a stage records (`sandbox_info`),
and running one program in a confined child interpreter (`run_in_sandbox`).  Judging programs
against tests, and the code reward, are in code_judge.py; what the child runs ahead of the
candidate is sandbox_child.py; the seccomp filter is sandbox_seccomp.py.

Each program runs in a child interpreter started `-I -S -X utf8` with an empty environment.
Untrusted code runs only under OS isolation; which kind is `sandbox_mode()`:

"bwrap" (preferred; bubblewrap on PATH): new pid, network, ipc, uts and cgroup namespaces; a new
  root holding only read-only binds of /usr and the interpreter's prefix, a fresh /proc (this pid
  namespace only), a minimal read-only /dev, and a size-capped tmpfs at /work (the cwd, the one
  writable place). As root, bwrap sets this up and the child switches to a random private uid
  before the candidate runs; as a normal user, bwrap uses an unprivileged user namespace and the
  candidate keeps the caller's uid (user namespaces must be allowed). The sandbox's init is killed
  at the end of each test, and the kernel then kills everything left in the pid namespace, so no
  daemon outlives the call.
"namespaces" (root with CAP_SYS_ADMIN, no bwrap): the child unshares mount, network, IPC and pid
  namespaces and forks; its child, the init (pid 1) of the new pid namespace, mounts a /proc of that
  namespace only, chroots into a directory of read-only binds of /usr and the prefix plus a
  size-capped tmpfs, switches to a random private uid and runs the candidate. The process that
  forked stays outside, as root, running nothing of the candidate's: it reports the init's pid to
  the parent (as bwrap's --info-fd does) and relays how the init ended. As with bwrap, the init is
  killed at the end of each test and the kernel then kills everything left in its pid namespace;
  the IPC namespace (SysV shared memory, semaphores, message queues) goes with it, so nothing a
  judged program allocated outlives the test, and no host pid exists for it to signal or probe.
"none": no isolation is available. `run_tests` (code_judge.py) then refuses (reason "no_isolation", reward 0)
  unless the process opted in with `require_isolation(allow_unisolated=True)` (config
  `sandbox: unsafe_allow_unisolated: true`) or the caller asked for `isolation="none"` itself.
  What is left is rlimits plus the audit hook below, which in-process code can switch off.

In every mode:
- rlimits: CPU time, address space, file size, open files, no core dumps, and RLIMIT_NPROC. NPROC
  counts the processes of the candidate's uid (the private uid as root; the caller's uid in a user
  namespace), which already runs at least one, so `max_processes=1` makes fork/clone/thread
  creation fail with EAGAIN whatever route is used (os.fork, _posixsubprocess, ctypes).
- a seccomp filter (isolated modes, when libseccomp is installed: `sandbox_info()["seccomp"]`)
  refusing with EPERM the kernel interfaces a judged program never needs: ptrace and cross-process
  memory access, new namespaces (unshare, setns, clone with namespace flags; clone3 is ENOSYS so
  libc falls back to clone), mounts, keyrings, bpf, perf events, userfaultfd, io_uring, modules.
- wall clock: the parent kills the sandbox at the per-test deadline.
- output: at most `output_bytes` of stdout are read; more kills the child and fails the test.
- an audit hook (PEP 578) in the child refuses sockets, process creation, signals, ctypes and file
  access outside the work dir and the stdlib by exiting at once. PEP 578 says audit hooks are not a
  sandbox, and this one can be switched off from inside; it is there for clear reasons in the
  verdict ("violation: ..."), never as the boundary.
"""
from __future__ import annotations

import json
import os
import secrets
import select
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Literal

from posttrain.rewards.sandbox_child import CHILD_PROGRAM
from posttrain.rewards.sandbox_seccomp import build_seccomp

SANDBOX_VERSION = "code-sandbox/4"
ISOLATED_MODES = ("bwrap", "namespaces")  # best first
_UID_RANGE = (1_000_000, 2_000_000_000)  # far above any real account


class SandboxUnavailable(RuntimeError):
    """No OS isolation on this machine and the caller did not opt in to running code without it."""


@dataclass(frozen=True)
class SandboxLimits:
    cpu_s: float = 2.0  # RLIMIT_CPU per test
    wall_s: float = 4.0  # per test, enforced by the parent
    total_wall_s: float = 20.0  # whole run_tests call; tests not started in time fail ("budget")
    memory_bytes: int = 512 * 2**20  # RLIMIT_AS (the interpreter itself takes ~20 MiB)
    output_bytes: int = 1 * 2**20  # stdout read per test, and the most a call's result record may take
    file_bytes: int = 8 * 2**20  # RLIMIT_FSIZE, and the scratch tmpfs size (x4)
    max_processes: int = 1  # RLIMIT_NPROC of the candidate's uid: 1 = no forks, no threads
    max_open_files: int = 64
    max_code_chars: int = 100_000
    # "auto": the best mode available, refusing when there is none (see require_isolation).
    # "none" runs without OS isolation: for tests of the judging logic only.
    isolation: Literal["auto", "bwrap", "namespaces", "none"] = "auto"
    audit_hook: bool = True  # False only to test what the kernel layers hold on their own


_STATE_LOCK = threading.Lock()
_PROBED: dict[str, str | None] = {}  # mode -> None when it works here, else why not
_CACHE: dict[str, object] = {}
_UNISOLATED_ALLOWED: list[bool] = [False]


def _seccomp_program() -> bytes | None:
    with _STATE_LOCK:
        if "seccomp" not in _CACHE:
            _CACHE["seccomp"] = build_seccomp()
        return _CACHE["seccomp"]  # type: ignore[return-value]


def _interpreter() -> str:
    # The base interpreter, not the venv shim: with -I -S only the stdlib is on sys.path, so the
    # sandbox needs only the base prefix bound in.
    return os.path.realpath(sys.executable)


def _binds() -> list[str]:
    binds = ["/usr"]
    for p in sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)}):
        if not p.startswith("/usr/") and p != "/usr":
            binds.append(p)
    return binds


def _parents(root: str, path: str) -> list[str]:
    out, cur = [], root
    for part in path.strip("/").split("/"):
        cur = os.path.join(cur, part)
        out.append(cur)
    return out


def _make_root(mode: str) -> str:
    """The host directory a namespaces/none child runs in (bwrap builds its root in memory)."""
    root = tempfile.mkdtemp(prefix="posttrain-sandbox-")
    os.makedirs(os.path.join(root, "work"), mode=0o700)
    if mode == "namespaces":
        os.chmod(root, 0o755)  # the private uid must traverse the chroot's "/"
        os.makedirs(os.path.join(root, "proc"), mode=0o555)
        for b in _binds():
            os.makedirs(root + b, mode=0o755, exist_ok=True)
            for parent in _parents(root, b):
                os.chmod(parent, 0o755)
        for link, target in (("lib", "usr/lib"), ("lib64", "usr/lib64"), ("bin", "usr/bin")):
            if os.path.islink("/" + link):
                os.symlink(target, os.path.join(root, link))
    return root


def _bwrap_features(bwrap: str) -> str:
    with _STATE_LOCK:
        if "bwrap_help" not in _CACHE:
            try:
                _CACHE["bwrap_help"] = subprocess.run([bwrap, "--help"], capture_output=True, text=True,
                                                      timeout=10).stdout
            except (OSError, subprocess.SubprocessError):
                _CACHE["bwrap_help"] = ""
        return _CACHE["bwrap_help"]  # type: ignore[return-value]


def _bwrap_argv(bwrap: str, as_root: bool, tmpfs_bytes: int, info_fd: int, seccomp_fd: int | None) -> list[str]:
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    if as_root:
        # bwrap runs privileged; the child keeps just enough to switch to its private uid, which
        # clears every capability before the candidate runs.
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv += ["--unshare-user"]
        if "--disable-userns" in _bwrap_features(bwrap):
            argv += ["--disable-userns"]
    for b in _binds():
        for parent in _parents("/", b)[:-1]:
            argv += ["--perms", "0755", "--dir", parent]
        argv += ["--ro-bind", b, b]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = "/" + name
        if os.path.islink(host):
            argv += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            argv += ["--ro-bind", host, host]
    argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
             "--perms", "1777", "--size", str(tmpfs_bytes), "--tmpfs", "/work",
             "--remount-ro", "/", "--chdir", "/work", "--clearenv", "--info-fd", str(info_fd)]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    return argv


def _bwrap_path() -> str | None:
    return shutil.which("bwrap")


def _temp_fd(data: bytes):
    f = tempfile.TemporaryFile()
    f.write(data)
    f.flush()
    f.seek(0)
    return f


def _private_uid() -> int:
    return secrets.randbelow(_UID_RANGE[1] - _UID_RANGE[0]) + _UID_RANGE[0]


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid` (a private sandbox uid) until none is left."""
    # kill(-1) signals every process the caller may signal but itself; it fails once there is none.
    sweep = "n=0; while kill -9 -1 2>/dev/null && [ $n -lt 100000 ]; do n=$((n + 1)); done"
    subprocess.run(["/bin/sh", "-c", sweep], user=uid, group=uid, extra_groups=[], env={}, cwd="/",
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)


def _open_init(info: bytes, outer_pid: int) -> int | None:
    """A pidfd on the sandbox's init (pid 1 of its pid namespace), from bwrap's --info-fd JSON."""
    try:
        pid = int(json.loads(info)["child-pid"])
        fd = os.pidfd_open(pid)
    except (ValueError, KeyError, TypeError, OSError):
        return None
    try:  # only bwrap itself can have forked a child of `outer_pid`, which we have not reaped
        with open(f"/proc/{pid}/stat", "rb") as f:
            ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        ppid = -1
    if ppid != outer_pid:
        os.close(fd)
        return None
    return fd


@dataclass
class ChildRun:
    """What one child run left: its exit status (negative: killed by that signal), the output read
    (stdout and the call's result record up to the limit, the head of stderr) and whether the
    deadline or the output limit ended it."""

    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    output_exceeded: bool
    wall_s: float
    result: bytes = b""


def _run_child(mode: str, root: str | None, code: str, call: str | None, stdin_text: str,
               limits: SandboxLimits, deadline: float, parts: dict | None = None) -> ChildRun:
    as_root = os.geteuid() == 0
    uid = _private_uid() if mode == "namespaces" or (mode == "bwrap" and as_root) else None
    seccomp = _seccomp_program() if mode in ISOLATED_MODES else None
    # The call's result goes on a pipe of its own, so the candidate's prints cannot mix with it;
    # the init's pid comes on another (bwrap --info-fd, or the namespaces mode's relay).
    res_r, res_w = os.pipe()
    info_r, info_w = os.pipe() if mode in ISOLATED_MODES else (None, None)
    cfg = {
        "mode": mode, "root": root, "binds": _binds(), "uid": uid, "code": code, "call": call,
        **{k: (parts or {}).get(k) for k in ("prelude", "setup", "script")},
        "result_fd": res_w, "info_fd": info_w, "cpu": max(1, int(limits.cpu_s + 0.999)),
        "mem": int(limits.memory_bytes),
        "fsize": int(limits.file_bytes), "nofile": int(limits.max_open_files),
        "nproc": int(limits.max_processes), "tmpfs_bytes": int(limits.file_bytes) * 4,
        "audit": bool(limits.audit_hook),
        "seccomp": seccomp.hex() if (seccomp and mode == "namespaces") else None,
    }
    files = [_temp_fd(json.dumps(cfg).encode()), _temp_fd(stdin_text.encode("utf-8"))]
    cfg_file, stdin_file = files
    pass_fds = [cfg_file.fileno(), res_w] + ([info_w] if info_w is not None else [])
    argv = [_interpreter(), "-I", "-S", "-X", "utf8", "-c", CHILD_PROGRAM, str(cfg_file.fileno())]
    cwd = root if mode == "namespaces" else os.path.join(root, "work") if root else "/"
    if mode == "bwrap":
        seccomp_fd = None
        if seccomp:
            files.append(_temp_fd(seccomp))
            seccomp_fd = files[-1].fileno()
            pass_fds.append(seccomp_fd)
        argv = _bwrap_argv(_bwrap_path() or "bwrap", as_root, cfg["tmpfs_bytes"], info_w, seccomp_fd) + argv
    init_fd = None
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=stdin_file, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                                env={}, start_new_session=True, close_fds=True, pass_fds=pass_fds)
    except BaseException:
        for fd in (res_r, info_r):
            if fd is not None:
                os.close(fd)
        raise
    finally:
        for f in files:
            f.close()
        for fd in (res_w, info_w):
            if fd is not None:
                os.close(fd)
    out, err, info, res = bytearray(), bytearray(), bytearray(), bytearray()
    timed_out = exceeded = exited = False

    def take(buf: bytearray, chunk: bytes) -> bool:
        """Append; True when stdout or the result went over the limit (stderr and info keep their head)."""
        if buf is not out and buf is not res:
            buf += chunk[: max(0, 8192 - len(buf))]
            return False
        buf += chunk
        if len(buf) <= limits.output_bytes:
            return False
        del buf[limits.output_bytes:]
        return True

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    sel.register(res_r, selectors.EVENT_READ, res)
    if info_r is not None:
        sel.register(info_r, selectors.EVENT_READ, info)
    # The leader's exit ends the test even while something it started still holds the pipes open.
    # Its pidfd (or, without pidfds, polling waitid with WNOWAIT) leaves it unreaped, so its
    # pid/pgid cannot be reused before the killpg in _stop.
    try:
        leader = os.pidfd_open(proc.pid)
        sel.register(leader, selectors.EVENT_READ, None)
    except OSError:
        leader = None
    try:
        while not (exited or exceeded):
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=left if leader is not None else min(left, 0.005)):
                if key.data is None:
                    exited = True
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    if key.data is info:
                        init_fd = _open_init(bytes(info), proc.pid)
                elif take(key.data, chunk):
                    exceeded = True
                    break
            if leader is None and not exited:
                exited = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        if exited:  # what the leader wrote before exiting is in the pipes' buffers
            for key in list(sel.get_map().values()):
                if key.data is None:
                    continue
                os.set_blocking(key.fd, False)
                try:  # stderr and info keep only their head: no need to read past it
                    while not exceeded and (key.data is out or key.data is res or len(key.data) < 8192):
                        chunk = os.read(key.fd, 65536)
                        if not chunk:
                            break
                        exceeded = take(key.data, chunk)
                except BlockingIOError:
                    pass
    finally:
        if init_fd is None and info:
            init_fd = _open_init(bytes(info), proc.pid)
        had_init = init_fd is not None
        _stop(proc, init_fd)
        sel.close()
        if leader is not None:
            os.close(leader)
        proc.stdout.close()
        proc.stderr.close()
        for fd in (res_r, info_r):
            if fd is not None:
                os.close(fd)
        if mode == "namespaces" and limits.max_processes > 1 and not had_init:
            # No pid namespace to kill (its init's pid never came): a setsid'd child left the
            # process group, but its uid is this run's alone.
            _kill_uid(uid)
    rc = proc.returncode
    if mode == "bwrap" and rc is not None and rc > 128:
        rc = 128 - rc  # bwrap reports a child killed by signal N as exit 128 + N
    return ChildRun(rc, bytes(out), bytes(err), timed_out, exceeded, time.monotonic() - t0, bytes(res))


def _stop(proc: subprocess.Popen, init_fd: int | None) -> None:
    """Kill what is left of one run and return once it is gone."""
    if init_fd is not None:
        try:
            signal.pidfd_send_signal(init_fd, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    if init_fd is not None:
        # The pidfd turns readable when the init has exited, which the kernel lets happen only
        # after every other process of its pid namespace is dead.
        poller = select.poll()
        poller.register(init_fd, select.POLLIN)
        poller.poll(30_000)
        os.close(init_fd)


def run_in_sandbox(isolation: str, code: str, call: str | None, stdin_text: str, limits: SandboxLimits,
                   deadline: float, parts: dict | None = None) -> ChildRun:
    """Run `code` once in a fresh child confined by `isolation` (a mode, or "none"), with its own scratch
    root, removed afterwards; `call` is evaluated after it and its value comes back as a record in
    `ChildRun.result` (code_judge.decode_result reads it). `parts`: a test's own code, in the same
    namespace: "prelude" before the candidate, "setup" after it (before the call), "script" (an
    assert program, run instead of a call; True is recorded when it finishes)."""
    root = None if isolation == "bwrap" else _make_root(isolation)
    try:
        return _run_child(isolation, root, code, call, stdin_text, limits, deadline, parts)
    finally:
        if root:
            shutil.rmtree(root, ignore_errors=True)


def _probe(mode: str) -> str | None:
    """None when `mode` runs a program here, else why not (one line)."""
    if not sys.platform.startswith("linux"):
        return "needs Linux"
    if mode == "bwrap":
        bwrap = _bwrap_path()
        if bwrap is None:
            return "bwrap not found on PATH"
        missing = [flag for flag in ("--size", "--perms", "--info-fd") if flag not in _bwrap_features(bwrap)]
        if missing:
            return f"{bwrap} lacks {', '.join(missing)} (bubblewrap too old)"
    elif mode == "namespaces" and os.geteuid() != 0:
        return "needs root (CAP_SYS_ADMIN)"
    root = _make_root(mode) if mode == "namespaces" else None
    try:
        run = _run_child(mode, root, "print(6 * 7)", None, "", SandboxLimits(), time.monotonic() + 20)
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    finally:
        if root:
            shutil.rmtree(root, ignore_errors=True)
    if run.returncode == 0 and run.stdout.strip() == b"42":
        return None
    lines = run.stderr.decode("utf-8", "replace").strip().splitlines()
    return (lines[-1] if lines else f"exit {run.returncode}")[:300]


def _unavailable(mode: str) -> str | None:
    with _STATE_LOCK:
        if mode in _PROBED:
            return _PROBED[mode]
    reason = _probe(mode)  # outside the lock: it runs a sandbox, which takes the lock for seccomp
    with _STATE_LOCK:
        return _PROBED.setdefault(mode, reason)


def sandbox_mode() -> str:
    """The isolation this machine gives untrusted code: "bwrap", "namespaces" or "none" (probed once
    per process by running a trivial program the way run_tests will)."""
    for mode in ISOLATED_MODES:
        if _unavailable(mode) is None:
            return mode
    return "none"


def sandbox_isolation(requested: str = "auto") -> str:
    """The mode run_tests uses for `SandboxLimits.isolation == requested`."""
    return sandbox_mode() if requested == "auto" else requested


def sandbox_info() -> dict:
    """What a stage logs once and records with its results: the mode, whether the seccomp filter is
    on, whether running without isolation was allowed, and why each better mode is unavailable."""
    mode = sandbox_mode()
    return {
        "mode": mode,
        "version": SANDBOX_VERSION,
        "seccomp": mode in ISOLATED_MODES and _seccomp_program() is not None,
        "unisolated_allowed": _UNISOLATED_ALLOWED[0],
        "unavailable": {m: _unavailable(m) for m in ISOLATED_MODES if _unavailable(m) is not None},
    }


def how_to_isolate() -> str:
    """Why there is no isolation here and how to get it (or to opt out): the refusal's message."""
    why = "; ".join(f"{m}: {_unavailable(m)}" for m in ISOLATED_MODES)
    return (
        "code rewards run untrusted programs and there is no OS isolation on this machine "
        f"({why}). Install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`). Run by a normal "
        "user it needs unprivileged user namespaces (`sysctl user.max_user_namespaces=15000`; on "
        "Ubuntu 24.04 also `sysctl kernel.apparmor_restrict_unprivileged_userns=0`); run by root it "
        "needs CAP_SYS_ADMIN (in a container without it, run as a normal user instead). To run "
        "without isolation anyway (the program can then read and write "
        "what this process can, reach the network and kill it), set "
        "`sandbox: unsafe_allow_unisolated: true` in the config."
    )


def require_isolation(allow_unisolated: bool = False) -> str:
    """The sandbox mode for this process's code rewards, checked before any code runs. Raises
    SandboxUnavailable, saying how to enable isolation, when there is none and `allow_unisolated`
    is False; with True, records the opt-in so that run_tests runs code unisolated."""
    mode = sandbox_mode()
    if mode == "none":
        if not allow_unisolated:
            raise SandboxUnavailable(how_to_isolate())
        with _STATE_LOCK:
            _UNISOLATED_ALLOWED[0] = True
    return mode


def unisolated_allowed() -> bool:
    """Whether this process opted in to running code without isolation (require_isolation)."""
    return _UNISOLATED_ALLOWED[0]
