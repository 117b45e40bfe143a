"""The program a sandboxed child interpreter runs ahead of the candidate's code: the namespaces
mode's namespaces, mounts and chroot, the switch to a private uid, rlimits, the seccomp filter
(namespaces mode; bwrap installs it itself), the audit hook; then the test's prelude, the candidate,
the test's setup and, for a call test, the record of its result (format in code_judge.py, which
decodes it; an assert program records True once it finishes).  code_sandbox.py starts
it; code_judge.py reads its exit codes."""
from __future__ import annotations

# The program below uses these values (written there as numbers: it has nothing to import them from).
VIOLATION_EXIT = 97  # the child's audit hook exits with this after writing "sandbox violation: ..."
SETUP_EXIT = 98  # namespaces / mounts / uid switch / seccomp failed in the child before the candidate ran
MAX_RESULT_DEPTH = 100  # containers nested deeper than this in a call's result: not a literal the judge takes
MAX_RESULT_ITEMS = 1_000_000  # values in one result, containers included

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
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
        1, 2, 4, 8, 32, 4096, 16384, 1 << 18)
    # mount, network, IPC (SysV shm and semaphores die with it) and pid namespaces
    ok(libc.unshare(0x00020000 | 0x40000000 | 0x08000000 | 0x20000000),
       "unshare(CLONE_NEWNS|CLONE_NEWNET|CLONE_NEWIPC|CLONE_NEWPID)")
    # A new pid namespace holds the caller's children, not the caller: the child goes on as its
    # init (pid 1), and this process stays outside to say which process that is and relay its end.
    pid = os.fork()
    if pid:
        _relay(pid, cfg["info_fd"], libc)
    os.close(cfg["info_fd"])
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
    # A /proc of this pid namespace only. Where the kernel refuses one (a container with a masked
    # /proc) there is none: host pids stay out of reach either way.
    libc.mount(b"proc", (root + "/proc").encode(), b"proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
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

def _relay(pid, info_fd, libc):
    # Runs as root outside the new pid namespace and the chroot, and runs no candidate code: it
    # reports the init's pid as bwrap's --info-fd does (the parent kills the whole pid namespace
    # through it), waits, and ends the way the init ended.
    libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG: SIGKILL when the judge goes
    os.write(info_fd, b'{"child-pid": %d}' % pid)
    os.closerange(3, 65536)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        import signal
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sig != signal.SIGKILL and sig != signal.SIGSTOP:
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)

def _drop_to(uid):
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)

def _limits(cfg):
    for res, value in ((resource.RLIMIT_CPU, cfg["cpu"]), (resource.RLIMIT_AS, cfg["mem"]),
                       (resource.RLIMIT_FSIZE, cfg["fsize"]), (resource.RLIMIT_NOFILE, cfg["nofile"]),
                       (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, cfg["nproc"])):
        # SIGXCPU first, SIGKILL a second later; the init of a pid namespace (the namespaces mode's
        # candidate) ignores SIGXCPU, so it gets the SIGKILL at the limit itself.
        hard = value + 1 if res == resource.RLIMIT_CPU and os.getpid() != 1 else value
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

def _reporter(result_fd):
    # Every name the record's writer uses is bound here, before the candidate runs: rebinding
    # builtins or os/sys/gc/json later does not reach it. It checks exact types and walks
    # containers with the builtin types' own methods, so none of the candidate's methods runs.
    import collections, gc
    type_, len_, list_, write, exit_now = type, len, list, os.write, os._exit
    int_hex, int_dec, float_hex, bytes_hex, str_encode = int.__format__, int.__repr__, float.hex, bytes.hex, str.encode
    dict_items, type_name = dict.items, type.__dict__["__name__"].__get__
    gc_disable, gettrace, settrace = gc.disable, sys.gettrace, sys.settrace
    getprofile, setprofile = sys.getprofile, sys.setprofile
    OrderedDict, defaultdict, Counter = collections.OrderedDict, collections.defaultdict, collections.Counter
    MAX_DEPTH, MAX_ITEMS = @MAX_RESULT_DEPTH@, @MAX_RESULT_ITEMS@

    def encode(value):
        out, stack, count = [], [(value, 0)], 0
        while stack:
            x, depth = stack.pop()
            count += 1
            if count > MAX_ITEMS:
                return "!more than %d values" % MAX_ITEMS
            t = type_(x)
            if x is None:
                out.append("N")
            elif x is True or x is False:
                out.append("T" if x is True else "F")
            elif t is int:
                out.append("i" + int_hex(x, "x"))
            elif t is float:
                out.append("f" + float_hex(x))
            elif t is complex:
                out.append("c" + float_hex(x.real) + "," + float_hex(x.imag))
            elif t is str:
                out.append("s" + bytes_hex(str_encode(x, "utf-8", "surrogatepass")))
            elif t is bytes:
                out.append("b" + bytes_hex(x))
            elif t is list or t is tuple or t is set or t is frozenset or t is dict or t is OrderedDict \
                    or t is defaultdict or t is Counter:
                if depth >= MAX_DEPTH:
                    return "!nested more than %d deep" % MAX_DEPTH
                if t is list or t is tuple or t is set or t is frozenset:
                    items = list_(x)
                    tag = "l" if t is list else "t" if t is tuple else "e" if t is set else "z"
                    out.append(tag + int_dec(len_(items)))
                else:  # the stdlib's dicts compare as dicts with a plain dict: encoded as one
                    pairs = list_(dict_items(x))
                    out.append("d" + int_dec(len_(pairs)))
                    items = [v for pair in pairs for v in pair]
                items.reverse()
                stack.extend([(v, depth + 1) for v in items])
            else:
                return "!not a literal: " + type_name(t)[:100]
        return "=" + " ".join(out)

    def report(value):
        if gettrace() is not None:
            settrace(None)
        if getprofile() is not None:
            setprofile(None)
        gc_disable()  # no finaliser of the candidate's runs mid-walk
        body = str_encode(encode(value), "utf-8", "surrogatepass")
        data = str_encode(int_dec(len_(body)), "ascii", "strict") + b"\n" + body
        try:
            while data:
                data = data[write(result_fd, data):]
        except OSError:
            exit_now(1)
        exit_now(0)  # nothing of the candidate's (atexit, finalisers) runs after the record
    return report

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
    code, call, audit, result_fd = cfg["code"], cfg["call"], cfg["audit"], cfg["result_fd"]
    prelude, setup, script = cfg.get("prelude"), cfg.get("setup"), cfg.get("script")
    cfg.clear()
    report = _reporter(result_fd) if call is not None or script is not None else None
    if audit:
        sys.addaudithook(_hook_for(work, readable))
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    if prelude:  # the test's code the candidate builds on (HumanEval's prompt: imports, helpers)
        exec(compile(prelude, "<prelude>", "exec"), namespace)
    exec(compile(code, "<solution>", "exec"), namespace)
    if setup:  # the test's code its call uses (MBPP's test_setup_code and test_imports)
        exec(compile(setup, "<setup>", "exec"), namespace)
    if script is not None:  # a forgeable assert program: it finished
        exec(compile(script, "<test>", "exec"), namespace)
        report(True)
    if call is not None:
        report(eval(compile(call, "<call>", "eval"), namespace))

_main(cfg)
del cfg, _main, _namespaces_setup, _relay, _drop_to, _limits, _hook_for, _libc, _reporter
'''.replace("@MAX_RESULT_DEPTH@", str(MAX_RESULT_DEPTH)).replace("@MAX_RESULT_ITEMS@", str(MAX_RESULT_ITEMS))
