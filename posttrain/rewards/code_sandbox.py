"""Run a candidate Python program against test cases in a throw-away sandbox; reward = tests passed.

One child interpreter per test case (as competitive-programming judges do: a crash, a hang or a
poisoned global in one test cannot leak into the next), started `-I -S -X utf8` with an empty
environment, in its own session so the whole process group can be killed at the wall limit.

Isolation layers, outermost first. "full" needs root (CAP_SYS_ADMIN), which is what the training
machines give us; elsewhere the sandbox degrades to "basic" and says so (`sandbox_isolation()`).

full (kernel-enforced, the actual boundary):
- new network namespace (`unshare(CLONE_NEWNET)`): only a loopback that is down, so every
  connect/bind fails, localhost included; abstract unix sockets are per-namespace too.
- new mount namespace + `chroot` into a fresh directory holding only read-only bind mounts of
  /usr and the interpreter's prefix and a size-capped tmpfs at /work (the cwd). Host files
  (/etc/passwd, the repo, data) do not exist in there, and the tmpfs size caps total disk use
  (RLIMIT_FSIZE only caps one file). The mounts die with the namespace.
- a private, random uid/gid (no passwd entry needed; root may setuid to any id). RLIMIT_NPROC
  counts processes per real uid and root ignores it, so as root it does nothing; under a uid of
  its own it counts exactly this sandbox's processes, so `max_processes=1` makes fork/clone/thread
  creation fail with EAGAIN, whatever route (os.fork, _posixsubprocess, ctypes) is used. A uid per
  run (not `nobody`) keeps concurrent sandboxes from sharing one budget or signalling each other.
- PR_SET_NO_NEW_PRIVS and PR_SET_PDEATHSIG(SIGKILL): no privilege regain, and the child dies if
  the parent does.
both modes:
- rlimits: CPU time, address space, file size, open files, no core dumps (and NPROC, see above).
- wall clock: the parent kills the process group (`start_new_session=True` + `os.killpg`).
- output: at most `output_bytes` of stdout are read; more kills the child and fails the test.
- an audit hook (PEP 578) in the child, installed before the candidate runs: socket.*,
  process creation (os.fork/exec/spawn/system, subprocess.Popen, pty.spawn), signals to other
  processes, ctypes, and `open`/listdir/chdir outside the work dir and the stdlib are refused by
  exiting at once (os._exit, so a `try/except` in the candidate cannot swallow it). PEP 578 says
  audit hooks are not a sandbox (in-process code can tamper with them), so in "full" mode this is
  defence in depth and a clear reason string; in "basic" mode it is most of what there is.
basic (not root, or namespaces refused): rlimits + wall kill + output cap + audit hook, in a
private temp dir as cwd. RLIMIT_NPROC still blocks forks for a non-root user (it counts all of the
user's processes, so 1 is always exceeded) but not for root.

Call tests compare by value: `ast.literal_eval(repr(result)) == ast.literal_eval(expected)` when
both are Python literals (so 5 == 5.0, but [1, 2] != (1, 2)), else the repr string against the
expected string. The child prints the repr after a per-run nonce; a candidate that deliberately
walks the stack into the harness (sys._getframe, which the stdlib itself needs) could read the nonce
and forge a result. Stdin/stdout tests are compared in the parent and cannot be forged that way.
"""
from __future__ import annotations

import ast
import json
import os
import re
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

SANDBOX_VERSION = "code-sandbox/1"

_VIOLATION_EXIT = 97  # the child's audit hook exits with this after writing "sandbox violation: ..."
_SETUP_EXIT = 98  # namespaces / mounts / uid switch failed in the child before the candidate ran
_UID_RANGE = (1_000_000, 2_000_000_000)  # far above any real account


@dataclass(frozen=True)
class SandboxLimits:
    cpu_s: float = 2.0  # RLIMIT_CPU per test
    wall_s: float = 4.0  # per test, enforced by the parent
    total_wall_s: float = 20.0  # whole run_tests call; tests not started in time fail ("budget")
    memory_bytes: int = 512 * 2**20  # RLIMIT_AS (the interpreter itself takes ~20 MiB)
    output_bytes: int = 1 * 2**20  # stdout read per test
    file_bytes: int = 8 * 2**20  # RLIMIT_FSIZE, and the tmpfs size (x4) in full mode
    max_processes: int = 1  # RLIMIT_NPROC under the private uid: 1 = no forks, no threads
    max_open_files: int = 64
    max_code_chars: int = 100_000  # passed on argv (Linux caps one argument at 128 KiB)
    isolation: Literal["auto", "full", "basic"] = "auto"
    audit_hook: bool = True  # False only to test what the kernel layers hold on their own


@dataclass(frozen=True)
class SandboxVerdict:
    reward: float
    reason: str  # pass | wrong_answer | runtime_error | timeout | cpu_limit | memory_limit |
    #              output_limit | file_limit | violation | budget | no_tests | no_code |
    #              code_too_long | bad_test | sandbox_error
    passed: int
    total: int
    details: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------- the child

# Runs as root until the candidate starts (full mode). Everything it needs arrives in argv[1].
_CHILD = r'''
import json, os, resource, sys
cfg = json.loads(sys.argv[1])
sys.argv = ["solution.py"]

def _full_setup(cfg):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    def ok(rc, what):
        if rc != 0:
            e = ctypes.get_errno()
            raise OSError(e, what + ": " + os.strerror(e))
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
    ok(libc.unshare(0x00020000 | 0x40000000), "unshare(CLONE_NEWNS|CLONE_NEWNET)")
    ok(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    root = cfg["root"]
    for src in cfg["binds"]:
        dst = (root + src).encode()
        ok(libc.mount(src.encode(), dst, None, MS_BIND | MS_REC, None), "bind " + src)
        ok(libc.mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None),
           "read-only " + src)
    uid = cfg["uid"]
    opts = "size=%d,mode=0700,uid=%d,gid=%d" % (cfg["tmpfs_bytes"], uid, uid)
    ok(libc.mount(b"tmpfs", (root + "/work").encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts.encode()), "tmpfs")
    os.chroot(root)
    os.chdir("/work")
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    ok(libc.prctl(38, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
    ok(libc.prctl(1, 9, 0, 0, 0), "PR_SET_PDEATHSIG")  # after setuid, which clears it
    resource.setrlimit(resource.RLIMIT_NPROC, (cfg["nproc"], cfg["nproc"]))
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]

def _limits(cfg):
    for res, value in ((resource.RLIMIT_CPU, cfg["cpu"]), (resource.RLIMIT_AS, cfg["mem"]),
                       (resource.RLIMIT_FSIZE, cfg["fsize"]), (resource.RLIMIT_NOFILE, cfg["nofile"]),
                       (resource.RLIMIT_CORE, 0)):
        hard = value + 1 if res == resource.RLIMIT_CPU else value  # SIGXCPU first, SIGKILL a second later
        resource.setrlimit(res, (value, hard))
    if cfg["mode"] == "basic":
        resource.setrlimit(resource.RLIMIT_NPROC, (cfg["nproc"], cfg["nproc"]))

def _hook_for(work, readable):
    import posixpath
    realpath, getcwd, write, exit_now = posixpath.realpath, os.getcwd, os.write, os._exit
    WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    REFUSED = frozenset([
        "os.system", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen",
        "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill", "os.startfile",
        # gc walks are how in-process code would reach this hook's closure and switch it off.
        # (sys._getframe stays allowed: namedtuple and enum need it at import.)
        "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    ])
    PATH_WRITE = frozenset(["os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.symlink", "os.link",
                            "os.chmod", "os.chown", "os.truncate", "os.utime", "shutil.rmtree",
                            "shutil.copyfile", "shutil.move"])
    PATH_READ = frozenset(["os.listdir", "os.scandir", "os.chdir", "glob.glob", "os.walk"])
    busy = []

    def refuse(what):
        write(2, ("\nsandbox violation: " + what + "\n").encode("utf-8", "replace"))
        exit_now(97)

    def inside(path, roots):
        # Audit events carry paths already converted by os.fspath; anything else is refused rather
        # than converted here, which could run the candidate's own __fspath__ inside the hook.
        if path is None or type(path) is int:
            return True  # the cwd, or an already-open descriptor
        if type(path) is bytes:
            path = path.decode("utf-8", "surrogateescape")
        if type(path) is not str:
            return False
        if not path.startswith("/"):
            path = getcwd() + "/" + path
        path = realpath(path)
        return any(path == r or path.startswith(r + "/") for r in roots)

    def hook(event, args):
        if busy:
            return  # our own realpath/getcwd calls
        busy.append(1)
        try:
            if event in REFUSED or event.startswith(("socket.", "ctypes.")):
                refuse(event)
            elif event == "import" and args and args[0] in ("ctypes", "_ctypes"):
                refuse("import " + args[0])
            elif event == "open":
                path, _, flags = args
                writing = type(flags) is int and flags & WRITE_FLAGS
                if not inside(path, (work,) if writing else (work,) + readable):
                    refuse("open %r" % (path,))
            elif event in PATH_WRITE or event in PATH_READ:
                roots = (work,) if event in PATH_WRITE else (work,) + readable
                for a in args:
                    if type(a) in (str, bytes) and not inside(a, roots):
                        refuse("%s %r" % (event, a))
        except (TypeError, ValueError, OSError) as e:
            refuse("%s (%s)" % (event, e))
        finally:
            busy.pop()
    return hook

def _main(cfg):
    if cfg["mode"] == "full":
        try:
            _full_setup(cfg)
        except BaseException as e:
            os.write(2, ("sandbox setup failed: %s\n" % (e,)).encode())
            os._exit(98)
    _limits(cfg)
    work = os.path.realpath(os.getcwd())
    readable = tuple(sorted({os.path.realpath(p) for p in sys.path if p}))
    code, call, nonce, audit = cfg["code"], cfg["call"], cfg["nonce"], cfg["audit"]
    cfg.clear()
    if audit:
        sys.addaudithook(_hook_for(work, readable))
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    exec(compile(code, "<solution>", "exec"), namespace)
    if call is not None:
        result = eval(compile(call, "<call>", "eval"), namespace)
        sys.stdout.flush()
        sys.stdout.write("\n" + nonce + repr(result) + "\n")

_main(cfg)
del cfg, _main, _full_setup, _limits, _hook_for
'''


# ----------------------------------------------------------------------------------- the parent

_ISOLATION: dict[str, str] = {}  # "auto" -> resolved mode, probed once per process


def _interpreter() -> str:
    # The base interpreter, not the venv shim: with -I -S only the stdlib is on sys.path, and the
    # chroot then needs only the base prefix bound in.
    return os.path.realpath(sys.executable)


def _binds() -> list[str]:
    binds = ["/usr"]
    for p in {os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)}:
        if not p.startswith("/usr/") and p != "/usr":
            binds.append(p)
    return binds


def _make_root(mode: str) -> str:
    root = tempfile.mkdtemp(prefix="posttrain-sandbox-")
    os.makedirs(os.path.join(root, "work"), mode=0o700)
    if mode == "full":
        os.chmod(root, 0o755)  # the private uid must traverse the chroot's "/"
        for b in _binds():
            os.makedirs(root + b, mode=0o755, exist_ok=True)
            for parent in _parents(root, b):
                os.chmod(parent, 0o755)
        for link, target in (("lib", "usr/lib"), ("lib64", "usr/lib64"), ("bin", "usr/bin")):
            if os.path.islink("/" + link):
                os.symlink(target, os.path.join(root, link))
    return root


def _parents(root: str, path: str) -> list[str]:
    out, cur = [], root
    for part in path.strip("/").split("/"):
        cur = os.path.join(cur, part)
        out.append(cur)
    return out


@dataclass
class _Run:
    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    output_exceeded: bool
    wall_s: float


def _run_child(root: str, mode: str, code: str, call: str | None, stdin_text: str, nonce: str,
               limits: SandboxLimits, deadline: float) -> _Run:
    uid = secrets.randbelow(_UID_RANGE[1] - _UID_RANGE[0]) + _UID_RANGE[0]
    cfg = {
        "mode": mode, "root": root, "binds": _binds(), "uid": uid, "code": code, "call": call,
        "nonce": nonce, "cpu": max(1, int(limits.cpu_s + 0.999)), "mem": int(limits.memory_bytes),
        "fsize": int(limits.file_bytes), "nofile": int(limits.max_open_files),
        "nproc": int(limits.max_processes), "tmpfs_bytes": int(limits.file_bytes) * 4,
        "audit": bool(limits.audit_hook),
    }
    stdin_path = os.path.join(root, "stdin.txt")
    with open(stdin_path, "w", encoding="utf-8") as f:
        f.write(stdin_text)
    cwd = root if mode == "full" else os.path.join(root, "work")
    argv = [_interpreter(), "-I", "-S", "-X", "utf8", "-c", _CHILD, json.dumps(cfg)]
    t0 = time.monotonic()
    with open(stdin_path, "rb") as stdin:
        proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                                env={}, start_new_session=True, close_fds=True)
    out, err = bytearray(), bytearray()
    timed_out = exceeded = False
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                if key.data is err:
                    err += chunk[: max(0, 8192 - len(err))]  # keep the head; drain the rest
                else:
                    out += chunk
                    if len(out) > limits.output_bytes:
                        exceeded = True
                        del out[limits.output_bytes:]
                        break
            if exceeded:
                break
        # Wait for the leader without reaping it (WNOWAIT): while it is an unreaped zombie its
        # pid/pgid cannot be reused, so the killpg below can only hit this sandbox's group.
        while not (timed_out or exceeded):
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(0.001)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
    return _Run(proc.returncode, bytes(out), bytes(err), timed_out, exceeded, time.monotonic() - t0)


def _literal(text: str):
    try:
        return True, ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def _same_value(got: str, expected: str) -> bool:
    """Literal equality, with int/float interchangeable (5 == 5.0) but no other cross-type matches
    (True != 1, [1, 2] != (1, 2)); non-literal reprs compare as strings."""
    ok_g, g = _literal(got)
    ok_e, e = _literal(expected)
    if not (ok_g and ok_e):
        return got.strip() == expected.strip()
    numbers = (int, float)
    same_kind = type(g) is type(e) or (type(g) in numbers and type(e) in numbers)
    try:
        return bool(same_kind and g == e)
    except Exception:  # noqa: BLE001 - comparing arbitrary literals must not raise
        return False


def _judge(run: _Run, test: dict, nonce: str, limits: SandboxLimits) -> tuple[bool, str]:
    """(passed, reason) for one finished child."""
    err = run.stderr.decode("utf-8", "replace")
    if run.output_exceeded:
        return False, f"output_limit: more than {limits.output_bytes} bytes"
    if run.timed_out:
        return False, f"timeout: wall {run.wall_s:.2f}s"
    rc = run.returncode
    if rc == _VIOLATION_EXIT and "sandbox violation:" in err:
        return False, "violation: " + err.rsplit("sandbox violation:", 1)[1].strip()[:200]
    if rc == _SETUP_EXIT and "sandbox setup failed:" in err:
        return False, "sandbox_error: " + err.rsplit("sandbox setup failed:", 1)[1].strip()[:200]
    if rc in (-signal.SIGXCPU, -signal.SIGKILL) and run.wall_s < limits.wall_s:
        return False, f"cpu_limit: {limits.cpu_s}s"
    if rc == -signal.SIGXFSZ:
        return False, f"file_limit: {limits.file_bytes} bytes"
    if rc != 0:
        tail = err.strip().splitlines()[-1] if err.strip() else f"exit {rc}"
        if "MemoryError" in err:
            return False, "memory_limit: " + tail[:200]
        if "File too large" in err or "No space left" in err:
            return False, "file_limit: " + tail[:200]
        return False, "runtime_error: " + tail[:200]
    stdout = run.stdout.decode("utf-8", "replace")
    if "call" in test:
        marker = stdout.rfind(nonce)
        if marker < 0:
            return False, "runtime_error: no result"
        got, expected = stdout[marker + len(nonce):].strip(), str(test["expected"])
        ok = _same_value(got, expected)
        return ok, "pass" if ok else f"wrong_answer: {test['call']} -> {got[:80]!r}, expected {expected[:80]!r}"
    got, expected = stdout.strip(), str(test["output"]).strip()
    ok = got == expected
    return ok, "pass" if ok else f"wrong_answer: got {got[:80]!r}, expected {expected[:80]!r}"


def _valid_test(test) -> bool:
    if not isinstance(test, dict):
        return False
    if "call" in test:
        return isinstance(test["call"], str) and "expected" in test
    return "output" in test


def _probe_full() -> bool:
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return False
    root = _make_root("full")
    try:
        run = _run_child(root, "full", "print(6 * 7)", None, "", "", SandboxLimits(),
                         time.monotonic() + 10)
        return run.returncode == 0 and run.stdout.strip() == b"42"
    except OSError:
        return False
    finally:
        shutil.rmtree(root, ignore_errors=True)


def sandbox_isolation(requested: str = "auto") -> str:
    """The mode run_tests will use: "full" (root: namespaces, chroot, private uid) or "basic"."""
    if requested != "auto":
        return requested
    if "auto" not in _ISOLATION:
        _ISOLATION["auto"] = "full" if _probe_full() else "basic"
    return _ISOLATION["auto"]


def run_tests(code: str, tests: list[dict], *, mode: Literal["all", "fraction"] = "all",
              limits: SandboxLimits = SandboxLimits()) -> SandboxVerdict:
    """Run `code` once per test case. mode="all": reward 1.0 only if every test passes (stops at the
    first failure); mode="fraction": the share passed. Never raises."""
    try:
        return _run_tests(code, tests, mode, limits)
    except Exception as e:  # noqa: BLE001 - a verifier scores, it does not crash the trainer
        total = len(tests) if isinstance(tests, list) else 0
        return SandboxVerdict(0.0, "sandbox_error", 0, total, [f"{type(e).__name__}: {e}"])


def _run_tests(code, tests, mode, limits: SandboxLimits) -> SandboxVerdict:
    start = time.monotonic()
    if not isinstance(tests, list) or not tests:
        return SandboxVerdict(0.0, "no_tests", 0, 0, [])
    total = len(tests)
    if not isinstance(code, str) or not code.strip():
        return SandboxVerdict(0.0, "no_code", 0, total, [])
    if len(code) > limits.max_code_chars or "\x00" in code:
        return SandboxVerdict(0.0, "code_too_long" if "\x00" not in code else "no_code", 0, total, [])
    if not all(_valid_test(t) for t in tests):
        return SandboxVerdict(0.0, "bad_test", 0, total, ["a test needs input/output or call/expected"])
    isolation = sandbox_isolation(limits.isolation)
    passed, details, first_failure = 0, [], None
    for i, test in enumerate(tests):
        now = time.monotonic()
        if now - start >= limits.total_wall_s:
            reason = f"budget: {limits.total_wall_s}s used before test {i}"
        else:
            deadline = min(now + limits.wall_s, start + limits.total_wall_s)
            nonce = "@@result-" + secrets.token_hex(8) + "@@"
            root = _make_root(isolation)
            try:
                run = _run_child(root, isolation, code, test.get("call"), str(test.get("input", "")), nonce,
                                 limits, deadline)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            ok, reason = _judge(run, test, nonce, limits)
            if ok:
                passed += 1
        details.append(f"test {i}: {reason}")
        if reason != "pass" and first_failure is None:
            first_failure = reason.split(":", 1)[0]
            if mode == "all":
                break
    reward = float(passed == total) if mode == "all" else passed / total
    return SandboxVerdict(reward, first_failure or "pass", passed, total, details)


# ----------------------------------------------------------------------------------- TRL reward

_FENCE_RE = re.compile(r"```(?:python|py|python3)[ \t]*\n(.*?)```", re.S | re.I)


def extract_code(response: str) -> str | None:
    """The last ```python fenced block of the answer part (after </think>); None if there is none or
    the response is still thinking."""
    from posttrain.chat import parse_response

    parsed = parse_response(response)
    if parsed.think_blocks and not parsed.closed:
        return None
    blocks = _FENCE_RE.findall(parsed.answer)
    return blocks[-1] if blocks else None


def _tests_of(value) -> list[dict] | None:
    if value is None or value == "" or value == []:
        return None
    return json.loads(value) if isinstance(value, str) else value


def code_execution(completions, tests, **kwargs) -> list[float | None]:
    """All-tests-pass reward (DeepSeek-R1's rule-based code reward: compile and run against test
    cases). Rows without tests → None. Completions run concurrently (each child mostly waits)."""
    from posttrain.rewards import completion_text

    def score(item) -> float | None:
        completion, row_tests = item
        try:
            cases = _tests_of(row_tests)
        except ValueError:
            return 0.0
        if cases is None:
            return None
        code = extract_code(completion_text(completion))
        return run_tests(code, cases).reward if code else 0.0

    items = list(zip(completions, tests))
    workers = max(1, min(4, os.cpu_count() or 1, len(items)))
    if workers == 1:
        return [score(it) for it in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(score, items))
