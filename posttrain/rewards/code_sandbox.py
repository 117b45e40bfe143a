"""Run a candidate Python program against test cases in a throw-away sandbox; reward = tests passed.

One child interpreter per test case (as competitive-programming judges do: a crash, a hang or a
poisoned global in one test cannot leak into the next), started `-I -S -X utf8` with an empty
environment. Untrusted code runs only under OS isolation; which kind is `sandbox_mode()`:

"bwrap" (preferred; bubblewrap on PATH): new pid, network, ipc, uts and cgroup namespaces; a new
  root holding only read-only binds of /usr and the interpreter's prefix, a fresh /proc (this pid
  namespace only), a minimal read-only /dev, and a size-capped tmpfs at /work (the cwd, the one
  writable place). As root, bwrap sets this up and the child switches to a random private uid
  before the candidate runs; as a normal user, bwrap uses an unprivileged user namespace and the
  candidate keeps the caller's uid (user namespaces must be allowed). The sandbox's init is killed
  at the end of each test, and the kernel then kills everything left in the pid namespace, so no
  daemon outlives the call.
"namespaces" (root with CAP_SYS_ADMIN, no bwrap): the child unshares mount and network namespaces,
  chroots into a directory of read-only binds of /usr and the prefix plus a size-capped tmpfs, and
  switches to a random private uid. There is no /proc. Processes of that uid are killed after each
  test when forks are allowed (with the default `max_processes=1` none can exist).
"none": no isolation is available. `run_tests` then refuses (reason "no_isolation", reward 0)
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

Call tests compare by value: `ast.literal_eval(repr(result)) == ast.literal_eval(expected)` when
both are Python literals (so 5 == 5.0, but [1, 2] != (1, 2)), else the repr string against the
expected string. The child prints the repr after a per-run nonce; a candidate that deliberately
walks the stack into the harness (sys._getframe, which the stdlib itself needs) could read the nonce
and forge a result. Stdin/stdout tests are compared in the parent and cannot be forged that way.
"""
from __future__ import annotations

import ast
import ctypes
import json
import logging
import os
import re
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

SANDBOX_VERSION = "code-sandbox/2"
ISOLATED_MODES = ("bwrap", "namespaces")  # best first

_VIOLATION_EXIT = 97  # the child's audit hook exits with this after writing "sandbox violation: ..."
_SETUP_EXIT = 98  # namespaces / mounts / uid switch / seccomp failed in the child before the candidate ran
_UID_RANGE = (1_000_000, 2_000_000_000)  # far above any real account
_log = logging.getLogger(__name__)


class SandboxUnavailable(RuntimeError):
    """No OS isolation on this machine and the caller did not opt in to running code without it."""


@dataclass(frozen=True)
class SandboxLimits:
    cpu_s: float = 2.0  # RLIMIT_CPU per test
    wall_s: float = 4.0  # per test, enforced by the parent
    total_wall_s: float = 20.0  # whole run_tests call; tests not started in time fail ("budget")
    memory_bytes: int = 512 * 2**20  # RLIMIT_AS (the interpreter itself takes ~20 MiB)
    output_bytes: int = 1 * 2**20  # stdout read per test
    file_bytes: int = 8 * 2**20  # RLIMIT_FSIZE, and the scratch tmpfs size (x4)
    max_processes: int = 1  # RLIMIT_NPROC of the candidate's uid: 1 = no forks, no threads
    max_open_files: int = 64
    max_code_chars: int = 100_000
    # "auto": the best mode available, refusing when there is none (see require_isolation).
    # "none" runs without OS isolation: for tests of the judging logic only.
    isolation: Literal["auto", "bwrap", "namespaces", "none"] = "auto"
    audit_hook: bool = True  # False only to test what the kernel layers hold on their own


@dataclass(frozen=True)
class SandboxVerdict:
    reward: float
    reason: str  # pass | wrong_answer | runtime_error | timeout | cpu_limit | memory_limit |
    #              output_limit | file_limit | violation | budget | no_tests | no_code |
    #              code_too_long | bad_test | no_isolation | sandbox_error
    passed: int
    total: int
    details: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------- the child

# Runs before the candidate (as root until the uid switch where there is one). Its configuration
# arrives on the descriptor named in argv[1], which it reads and closes.
_CHILD = r'''
import json, os, resource, sys
with open(int(sys.argv[1]), "rb") as _f:
    cfg = json.loads(_f.read())
sys.argv = ["solution.py"]

def _libc():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    def ok(rc, what):
        if rc != 0:
            e = ctypes.get_errno()
            raise OSError(e, what + ": " + os.strerror(e))
    return ctypes, libc, ok

def _namespaces_setup(cfg):
    ctypes, libc, ok = _libc()
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
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
    _drop_to(uid)
    ok(libc.prctl(38, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
    ok(libc.prctl(1, 9, 0, 0, 0), "PR_SET_PDEATHSIG")  # after setuid, which clears it
    if cfg["seccomp"]:
        prog = bytes.fromhex(cfg["seccomp"])
        buf = ctypes.create_string_buffer(prog, len(prog))
        class Fprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
        fprog = Fprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
        ok(libc.prctl(22, 2, ctypes.byref(fprog), 0, 0), "PR_SET_SECCOMP")
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]

def _drop_to(uid):
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)

def _limits(cfg):
    for res, value in ((resource.RLIMIT_CPU, cfg["cpu"]), (resource.RLIMIT_AS, cfg["mem"]),
                       (resource.RLIMIT_FSIZE, cfg["fsize"]), (resource.RLIMIT_NOFILE, cfg["nofile"]),
                       (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, cfg["nproc"])):
        hard = value + 1 if res == resource.RLIMIT_CPU else value  # SIGXCPU first, SIGKILL a second later
        resource.setrlimit(res, (value, hard))

def _hook_for(work, readable):
    import posixpath
    realpath, getcwd, write, exit_now = posixpath.realpath, os.getcwd, os.write, os._exit
    WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    REFUSED = frozenset([
        "os.system", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen",
        "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill", "os.startfile",
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
    try:
        if cfg["mode"] == "namespaces":
            _namespaces_setup(cfg)
        elif cfg["uid"] is not None:
            _drop_to(cfg["uid"])
        _limits(cfg)
    except BaseException as e:
        os.write(2, ("sandbox setup failed: %s\n" % (e,)).encode())
        os._exit(98)
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
del cfg, _main, _namespaces_setup, _drop_to, _limits, _hook_for, _libc
'''


# ----------------------------------------------------------------------------------- seccomp

# Refused with EPERM: nothing a judged program needs, each a way to reach other processes, the
# kernel's larger attack surface, or out of the namespaces.
_SECCOMP_DENY = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
    "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "acct", "swapon", "swapoff", "reboot", "syslog", "quotactl", "name_to_handle_at",
    "open_by_handle_at", "lookup_dcookie", "vhangup", "iopl", "ioperm", "uselib",
)
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
_CLONE_NS_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_CMP_MASKED_EQ = 7


def _scmp_errno(err: int) -> int:
    return 0x00050000 | (err & 0xFFFF)


class _ScmpArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def _build_seccomp() -> bytes | None:
    """The filter as a raw BPF program (what bwrap --seccomp and PR_SET_SECCOMP take), compiled by
    libseccomp for this machine's architecture; None without libseccomp."""
    import ctypes.util

    try:
        lib = ctypes.CDLL("libseccomp.so.2")
    except OSError:
        found = ctypes.util.find_library("seccomp")
        try:
            lib = ctypes.CDLL(found) if found else None
        except OSError:
            lib = None
    if lib is None:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ScmpArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)  # other architectures' syscalls: libseccomp kills
    if not ctx:
        return None
    try:
        def add(name: str, action: int, *cmp: _ScmpArgCmp) -> None:
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:  # not a syscall on this architecture
                return
            args = (_ScmpArgCmp * len(cmp))(*cmp) if cmp else None
            if lib.seccomp_rule_add_array(ctx, action, nr, len(cmp), args) != 0:
                raise OSError(f"seccomp rule for {name}")

        for name in _SECCOMP_DENY:
            add(name, _scmp_errno(1))
        add("clone3", _scmp_errno(38))  # ENOSYS: its flags sit in memory a filter cannot read
        if os.uname().machine in ("x86_64", "aarch64"):  # where clone's flags are argument 0
            for flag in _CLONE_NS_FLAGS:
                add("clone", _scmp_errno(1), _ScmpArgCmp(0, _SCMP_CMP_MASKED_EQ, flag, flag))
        with tempfile.TemporaryFile() as f:
            if lib.seccomp_export_bpf(ctx, f.fileno()) != 0:
                return None
            f.seek(0)
            return f.read() or None
    except OSError:
        return None
    finally:
        lib.seccomp_release(ctx)


# ----------------------------------------------------------------------------------- the parent

_STATE_LOCK = threading.Lock()
_PROBED: dict[str, str | None] = {}  # mode -> None when it works here, else why not
_CACHE: dict[str, object] = {}
_UNISOLATED_ALLOWED: list[bool] = [False]


def _seccomp_program() -> bytes | None:
    with _STATE_LOCK:
        if "seccomp" not in _CACHE:
            _CACHE["seccomp"] = _build_seccomp()
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
class _Run:
    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    output_exceeded: bool
    wall_s: float


def _run_child(mode: str, root: str | None, code: str, call: str | None, stdin_text: str, nonce: str,
               limits: SandboxLimits, deadline: float) -> _Run:
    as_root = os.geteuid() == 0
    uid = _private_uid() if mode == "namespaces" or (mode == "bwrap" and as_root) else None
    seccomp = _seccomp_program() if mode in ISOLATED_MODES else None
    cfg = {
        "mode": mode, "root": root, "binds": _binds(), "uid": uid, "code": code, "call": call,
        "nonce": nonce, "cpu": max(1, int(limits.cpu_s + 0.999)), "mem": int(limits.memory_bytes),
        "fsize": int(limits.file_bytes), "nofile": int(limits.max_open_files),
        "nproc": int(limits.max_processes), "tmpfs_bytes": int(limits.file_bytes) * 4,
        "audit": bool(limits.audit_hook),
        "seccomp": seccomp.hex() if (seccomp and mode == "namespaces") else None,
    }
    files = [_temp_fd(json.dumps(cfg).encode()), _temp_fd(stdin_text.encode("utf-8"))]
    cfg_file, stdin_file = files
    pass_fds = [cfg_file.fileno()]
    info_r = info_w = None
    argv = [_interpreter(), "-I", "-S", "-X", "utf8", "-c", _CHILD, str(cfg_file.fileno())]
    cwd = root if mode == "namespaces" else os.path.join(root, "work") if root else "/"
    if mode == "bwrap":
        info_r, info_w = os.pipe()
        seccomp_fd = None
        if seccomp:
            files.append(_temp_fd(seccomp))
            seccomp_fd = files[-1].fileno()
            pass_fds.append(seccomp_fd)
        pass_fds.append(info_w)
        argv = _bwrap_argv(_bwrap_path() or "bwrap", as_root, cfg["tmpfs_bytes"], info_w, seccomp_fd) + argv
    init_fd = None
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=stdin_file, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                                env={}, start_new_session=True, close_fds=True, pass_fds=pass_fds)
    except BaseException:
        if info_r is not None:
            os.close(info_r)
        raise
    finally:
        for f in files:
            f.close()
        if info_w is not None:
            os.close(info_w)
    out, err, info = bytearray(), bytearray(), bytearray()
    timed_out = exceeded = exited = False

    def take(buf: bytearray, chunk: bytes) -> bool:
        """Append; True when stdout went over its limit (stderr and info keep their head)."""
        if buf is not out:
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
                    while not exceeded and (key.data is out or len(key.data) < 8192):
                        chunk = os.read(key.fd, 65536)
                        if not chunk:
                            break
                        exceeded = take(key.data, chunk)
                except BlockingIOError:
                    pass
    finally:
        if init_fd is None and info:
            init_fd = _open_init(bytes(info), proc.pid)
        _stop(proc, init_fd)
        sel.close()
        if leader is not None:
            os.close(leader)
        proc.stdout.close()
        proc.stderr.close()
        if info_r is not None:
            os.close(info_r)
        if mode == "namespaces" and limits.max_processes > 1:
            _kill_uid(uid)  # a setsid'd child left the process group; its uid is this run's alone
    rc = proc.returncode
    if mode == "bwrap" and rc is not None and rc > 128:
        rc = 128 - rc  # bwrap reports a child killed by signal N as exit 128 + N
    return _Run(rc, bytes(out), bytes(err), timed_out, exceeded, time.monotonic() - t0)


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
    if rc == 1 and err.startswith("bwrap: "):
        return False, "sandbox_error: " + err.strip().splitlines()[0][:200]
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
        run = _run_child(mode, root, "print(6 * 7)", None, "", "", SandboxLimits(), time.monotonic() + 20)
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


def _how_to_isolate() -> str:
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
            raise SandboxUnavailable(_how_to_isolate())
        with _STATE_LOCK:
            _UNISOLATED_ALLOWED[0] = True
    return mode


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
    if isolation == "none" and limits.isolation == "auto" and not _UNISOLATED_ALLOWED[0]:
        return SandboxVerdict(0.0, "no_isolation", 0, total, [_how_to_isolate()])
    passed, details, first_failure = 0, [], None
    for i, test in enumerate(tests):
        now = time.monotonic()
        if now - start >= limits.total_wall_s:
            reason = f"budget: {limits.total_wall_s}s used before test {i}"
        else:
            deadline = min(now + limits.wall_s, start + limits.total_wall_s)
            nonce = "@@result-" + secrets.token_hex(8) + "@@"
            root = None if isolation == "bwrap" else _make_root(isolation)
            try:
                run = _run_child(isolation, root, code, test.get("call"), str(test.get("input", "")), nonce,
                                 limits, deadline)
            finally:
                if root:
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
    cases). Rows without tests → None. Completions run concurrently (each child mostly waits).
    Without OS isolation (and no `require_isolation(allow_unisolated=True)`) nothing runs and every
    row with tests scores 0, logged once; stages call require_isolation at start to fail early."""
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
        if not code:
            return 0.0
        verdict = run_tests(code, cases)
        if verdict.reason == "no_isolation" and not _CACHE.get("refusal_logged"):
            _CACHE["refusal_logged"] = True
            _log.error("code reward refused to run untrusted code (scored 0): %s", verdict.details[0])
        return verdict.reward

    items = list(zip(completions, tests))
    workers = max(1, min(4, os.cpu_count() or 1, len(items)))
    if workers == 1:
        return [score(it) for it in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(score, items))
