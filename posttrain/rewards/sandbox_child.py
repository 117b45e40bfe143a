"""The program a sandboxed child interpreter runs ahead of the candidate's code: the namespaces
mode's mounts and chroot, the switch to a private uid, rlimits, the seccomp filter (namespaces mode;
bwrap installs it itself), the audit hook; then the candidate and, for a call test, its result
after a per-run nonce.  code_sandbox.py starts it; code_judge.py reads its exit codes."""
from __future__ import annotations

# The program below exits with these codes (written there as numbers: it has nothing to import them from).
VIOLATION_EXIT = 97  # the child's audit hook exits with this after writing "sandbox violation: ..."
SETUP_EXIT = 98  # namespaces / mounts / uid switch / seccomp failed in the child before the candidate ran

# Runs before the candidate (as root until the uid switch where there is one). Its configuration
# arrives on the descriptor named in argv[1], which it reads and closes.
CHILD_PROGRAM = r'''
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
