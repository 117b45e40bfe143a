"""The code reward's sandbox: judging, limits, and what each OS isolation layer holds.

Attacks run in every isolated mode this machine has (skipped, with the reason, where a mode is not
available), both with the audit hook switched off from inside and with the hook absent, and assert
the errno the isolation layer itself produces, so that each test fails when its layer is removed.
"""
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from posttrain.chat import assemble_response
from posttrain.rewards import REWARDS, build_rewards
from posttrain.rewards.code_judge import code_execution, extract_code, run_tests
from posttrain.rewards.code_sandbox import ISOLATED_MODES, SANDBOX_VERSION, SandboxLimits, sandbox_info, sandbox_mode

ADD = [{"input": "2 3\n", "output": "5"}, {"input": "10 -4\n", "output": "6\n"}, {"input": "0 0", "output": "0"}]
ADD_OK = "a, b = map(int, input().split())\nprint(a + b)\n"
FAST = SandboxLimits(cpu_s=1, wall_s=1.5)
INFO = sandbox_info()
ROOT = os.geteuid() == 0
REPO = Path(__file__).resolve().parents[1]

MODES = [pytest.param(m, marks=pytest.mark.skipif(m in INFO["unavailable"], reason=f"{m} sandbox unavailable "
                                                  f"here: {INFO['unavailable'].get(m)}"))
         for m in ISOLATED_MODES]
needs_root = pytest.mark.skipif(not ROOT, reason="the private sandbox uid needs root")

# Switches the audit hook off from inside: the hook resolves paths with posixpath.realpath, which
# calls os.fspath; a replacement walks up into the hook's frame and leaves its re-entrancy guard set.
HOOK_ESCAPE = '''
import os as _os, sys as _sys
def _fspath(p, _real=_os.fspath):
    f = _sys._getframe(1)
    while f is not None:
        guard = f.f_locals.get("busy")
        if type(guard) is list:
            guard.append(1)
        f = f.f_back
    return _real(p)
_os.fspath = _fspath
try:
    open("escape-trigger")
except OSError:
    pass
_os.fspath = _fspath.__defaults__[0]
'''

ATTEMPT = '''
import errno, os, signal, socket, sys
def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
'''


def _one(code: str, output: str = "ok", limits: SandboxLimits = FAST):
    return run_tests(code, [{"input": "", "output": output}], limits=limits)


def _attack(mode: str, hook: bool, body: str, expected: str, **limits):
    """Run `body` (which defines attack() -> str) in `mode`; with the hook on, after switching it off."""
    code = (HOOK_ESCAPE if hook else "") + ATTEMPT + body
    lim = SandboxLimits(**{"cpu_s": 2, "wall_s": 10, **limits}, isolation=mode, audit_hook=hook)
    return run_tests(code, [{"call": "attack()", "expected": repr(expected)}], limits=lim)


def _processes_with(token: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if token.encode() in cmdline.read_bytes().split(b"\0"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def _processes_of(uid: int) -> int:
    """Processes running under `uid` right now."""
    n = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid_line = next(line for line in status.read_text().splitlines() if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        n += int(uid_line.split()[1]) == uid
    return n


@pytest.fixture
def sandbox_uid(monkeypatch):
    """The private uid every sandbox of this test runs under (other sandboxes on a shared host
    have their own, so counting this one's processes is not disturbed by theirs)."""
    from posttrain.rewards import code_sandbox

    uid = code_sandbox._private_uid()
    monkeypatch.setattr(code_sandbox, "_private_uid", lambda: uid)
    return uid


@pytest.fixture
def usr1_count():
    """SIGUSR1s this test process received while the fixture was active."""
    got = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
    yield got
    signal.signal(signal.SIGUSR1, previous)


@pytest.fixture
def listener():
    """A TCP listener on the host's loopback, as an RPC server or a debugger port would be."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.setblocking(False)
    yield srv
    srv.close()


def _accepted(srv: socket.socket) -> bool:
    try:
        srv.accept()[0].close()
        return True
    except BlockingIOError:
        return False


# ----------------------------------------------------------------------------------- judging

def test_correct_program_passes_and_wrong_output_fails():
    v = run_tests(ADD_OK, ADD)
    assert (v.reward, v.reason, v.passed, v.total) == (1.0, "pass", 3, 3)
    wrong = run_tests("a, b = map(int, input().split())\nprint(a - b)\n", ADD)
    assert wrong.reward == 0.0 and wrong.reason == "wrong_answer"
    assert wrong.passed == 0 and len(wrong.details) == 1  # "all" stops at the first failure


def test_fraction_mode_counts_passed_tests():
    off_when_zero = "a, b = map(int, input().split())\nprint(a + b if a else 1)\n"
    assert run_tests(off_when_zero, ADD, mode="all").reward == 0.0
    v = run_tests(off_when_zero, ADD, mode="fraction")
    assert v.reward == pytest.approx(2 / 3) and (v.passed, v.total) == (2, 3) and len(v.details) == 3


def test_call_tests_compare_values():
    code = "def f(a, b):\n    return a + b\n\ndef g():\n    return [1, 2]\n"
    v = run_tests(code, [{"call": "f(2, 3)", "expected": "5"}, {"call": "f(2.5, 2.5)", "expected": "5"},
                         {"call": "g()", "expected": "[1, 2]"}])
    assert v.reward == 1.0, v.details
    assert run_tests(code, [{"call": "g()", "expected": "(1, 2)"}]).reward == 0.0  # list is not a tuple
    # `==`, as the datasets' own `assert f(1, 0) == True` compares: 1 == True
    assert run_tests(code, [{"call": "f(1, 0)", "expected": "True"}]).reward == 1.0
    # the candidate's own prints do not disturb the returned value
    assert run_tests("def h():\n    print(99)\n    return 7\n", [{"call": "h()", "expected": "7"}]).reward == 1.0


def test_bad_inputs_score_zero_without_raising():
    assert run_tests("print(1)", []).reason == "no_tests"
    assert run_tests("", ADD).reason == "no_code"
    assert run_tests("print(1)", [{"nonsense": 1}]).reason == "bad_test"
    assert run_tests("x" * 200_000, ADD).reason == "code_too_long"
    assert run_tests("def f(:\n", ADD).reason == "runtime_error"  # syntax error


def test_code_execution_reward_reads_the_answer_part():
    fenced = f"Here:\n```python\n{ADD_OK}```\n"
    good = assemble_response("add the two numbers", fenced)
    in_think_only = f"<think>\n```python\n{ADD_OK}```\n</think>\n\nno code here"
    still_thinking = "<think>\n```python\n" + ADD_OK + "```"
    assert extract_code(good) == ADD_OK and extract_code(in_think_only) is None
    assert extract_code(still_thinking) is None
    rows = [good, assemble_response("x", "```python\nprint(0)\n```"), in_think_only, good]
    tests = [ADD, ADD, ADD, None]
    assert code_execution(rows, tests=tests) == [1.0, 0.0, 0.0, None]
    # the training reward is the code kind's verdict (rows of other kinds: None)
    assert REWARDS["code"].kinds == {"code"}
    funcs, _ = build_rewards({"code": 1.0})
    assert funcs[0].__name__ == "code"
    assert funcs[0](rows[:3], tests=tests[:3], kind=["code"] * 3) == [1.0, 0.0, 0.0]
    assert funcs[0](rows[:1], kind=["math"], answer=["3"]) == [None]


# ----------------------------------------------------------------------------------- limits, every mode

@pytest.mark.parametrize("mode", MODES)
def test_deadlines_are_enforced(mode):
    """Code built to exceed each limit gets that limit's verdict (the call returning at all is the
    wall-clock contract: the sleeper would otherwise take a minute)."""
    busy = _one("while True:\n    pass\n", limits=SandboxLimits(cpu_s=1, wall_s=60, isolation=mode))
    assert busy.reward == 0.0 and busy.reason == "cpu_limit", busy.details
    sleeper = _one("import time\ntime.sleep(60)\n", limits=SandboxLimits(wall_s=1.5, isolation=mode))
    assert sleeper.reward == 0.0 and sleeper.reason == "timeout", sleeper.details
    many = run_tests("import time\ntime.sleep(60)\n", [{"input": "", "output": "ok"}] * 5, mode="fraction",
                     limits=SandboxLimits(wall_s=1, total_wall_s=2.5, isolation=mode))
    assert many.passed == 0 and many.details[-1].startswith("test 4: budget"), many.details


@pytest.mark.parametrize("mode", MODES)
def test_fork_bomb_gets_zero_and_leaves_nothing_behind(mode, sandbox_uid):
    v = _one("import os\nwhile True:\n    os.fork()\n", limits=SandboxLimits(cpu_s=1, wall_s=1.5, isolation=mode))
    assert v.reward == 0.0 and v.reason == "violation", v.details
    # With the hook off, RLIMIT_NPROC of the candidate's uid refuses every fork.
    persistent = ("import os\nn = 0\nfor _ in range(200):\n    try:\n        os.fork()\n        n += 1\n"
                  "    except OSError:\n        pass\nprint(n)\n")
    v = _one(persistent, output="0", limits=SandboxLimits(cpu_s=1, wall_s=5, isolation=mode, audit_hook=False))
    assert v.reward == 1.0, v.details
    if ROOT:
        assert _processes_of(sandbox_uid) == 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("code", ["x = bytearray(10**10)\nprint('ok')",
                                  "xs = []\nwhile True:\n    xs.append(bytearray(2**20))"])
def test_unbounded_allocation_gets_zero(mode, code):
    v = _one(code, limits=SandboxLimits(cpu_s=2, wall_s=10, memory_bytes=256 * 2**20, isolation=mode))
    assert v.reward == 0.0 and v.reason == "memory_limit", v.details


@pytest.mark.parametrize("mode", MODES)
def test_huge_output_is_cut(mode):
    v = _one("while True:\n    print('x' * 10000)\n", limits=SandboxLimits(output_bytes=100_000, wall_s=30,
                                                                          isolation=mode))
    assert v.reward == 0.0 and v.reason == "output_limit", v.details


@pytest.mark.parametrize("mode", MODES)
def test_big_file_write_is_stopped(mode):
    code = "with open('big', 'wb') as f:\n    while True:\n        f.write(b'z' * 2**16)\n"
    v = _one(code, limits=SandboxLimits(file_bytes=2**20, wall_s=10, isolation=mode))
    assert v.reward == 0.0 and v.reason == "file_limit", v.details
    # many files under the per-file limit: the scratch tmpfs (4 x file_bytes) is full
    many = "for i in range(100):\n    open('f%d' % i, 'wb').write(b'z' * (2**20 - 1))\n"
    v = _one(many, limits=SandboxLimits(file_bytes=2**20, wall_s=10, isolation=mode, audit_hook=False))
    assert v.reward == 0.0 and v.reason == "file_limit", v.details


@pytest.mark.parametrize("mode", MODES)
def test_scratch_dir_is_private_and_removed(mode, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = ("import os\nopen('scratch.txt', 'w').write('hi')\n"
            "alone = open('scratch.txt').read() == 'hi' and os.listdir('.') == ['scratch.txt']\n"
            "print('private' if alone else 'shared')\n")
    v = run_tests(code, [{"input": "", "output": "private"}] * 2, limits=SandboxLimits(isolation=mode))
    assert v.reward == 1.0, v.details  # the second run does not see the first run's file
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mode", MODES)
def test_child_does_not_see_the_parent_environment(mode, monkeypatch):
    monkeypatch.setenv("POSTTRAIN_SECRET_TOKEN", "hunter2")
    code = "import os\nprint('leak' if 'POSTTRAIN_SECRET_TOKEN' in os.environ or 'PATH' in os.environ else 'clean')\n"
    v = _one(code, output="clean", limits=SandboxLimits(isolation=mode))
    assert v.reward == 1.0, v.details


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("code", [
    "print(open('/etc/passwd').read())",
    "print(open('../../../../etc/passwd').read())",
    "import os\nprint(os.listdir('/'))",
    "import os\nos.symlink('/etc/passwd', 'p')\nprint(open('p').read())",
    "import socket\nsocket.socket()",
    "import subprocess\nsubprocess.run(['true'])",
])
def test_the_hook_names_what_it_refused(mode, code):
    v = _one(code, limits=SandboxLimits(isolation=mode))
    assert v.reward == 0.0 and v.reason == "violation", v.details


@pytest.mark.parametrize("mode", MODES)
def test_host_files_are_not_there(mode):
    body = "def attack():\n    return attempt(lambda: open('/etc/passwd').read())\n"
    assert _attack(mode, False, body, "ENOENT").reward == 1.0


# ----------------------------------------------------------------------------------- isolation layers

# Each attack runs twice per mode: with the audit hook switched off from inside (what a policy
# under RL pressure would do) and with no hook at all. The expected errno is the one the layer
# under test produces, so replacing it by another layer's refusal fails the test too.
HOOK = pytest.mark.parametrize("hook", [True, False], ids=["hook-escaped", "no-hook"])


@HOOK
@pytest.mark.parametrize("mode", MODES)
def test_no_signals_reach_the_harness(mode, hook, usr1_count):
    """Layer: the pid namespace, bwrap's or the namespaces mode's (the harness's pid does not exist
    in it; without it the namespaces mode's private uid still gets EPERM)."""
    harness = os.getpid()
    body = (f"def attack():\n"
            f"    via_pidfd = attempt(lambda: signal.pidfd_send_signal(os.pidfd_open({harness}), signal.SIGUSR1))\n"
            f"    via_kill = attempt(lambda: os.kill({harness}, signal.SIGUSR1))\n"
            f"    return via_pidfd + ',' + via_kill\n")
    v = _attack(mode, hook, body, "ESRCH,ESRCH")
    assert v.reward == 1.0, v.details
    assert usr1_count == []


@HOOK
@pytest.mark.parametrize("mode", MODES)
def test_the_harness_environment_cannot_be_read(mode, hook):
    """Layer: the sandbox's /proc shows only its own pid namespace (or, where the kernel refuses
    the namespaces mode one, does not exist)."""
    body = f"def attack():\n    return attempt(lambda: open('/proc/{os.getpid()}/environ', 'rb').read())\n"
    v = _attack(mode, hook, body, "ENOENT")
    assert v.reward == 1.0, v.details


@HOOK
@pytest.mark.parametrize("mode", MODES)
def test_no_network_not_even_loopback(mode, hook, listener):
    """Layer: the network namespace. A listener on the host's loopback is there to be reached
    (without the namespace the connection succeeds); in bwrap's namespace loopback is up but empty
    (refused), in the namespaces mode it is down (unreachable)."""
    port = listener.getsockname()[1]
    body = ("def attack():\n"
            f"    return attempt(lambda: socket.create_connection(('127.0.0.1', {port}), timeout=3).close())\n")
    want = {"bwrap": "ECONNREFUSED", "namespaces": "ENETUNREACH"}[mode]
    v = _attack(mode, hook, body, want)
    assert v.reward == 1.0, v.details
    assert not _accepted(listener)


@HOOK
@pytest.mark.parametrize("mode", MODES)
def test_the_stdlib_is_mounted_read_only(mode, hook):
    """Layer: read-only binds. A sitecustomize.py written into the interpreter's stdlib through
    os.open(dir_fd=...) would run in every later Python on the host; also no writes to the root,
    only to the scratch dir."""
    body = ("import os.path\n"
            "def attack():\n"
            "    lib = os.open(os.path.dirname(os.__file__), os.O_RDONLY)\n"
            "    site = attempt(lambda: os.close(os.open('sitecustomize.py', os.O_WRONLY | os.O_CREAT, 0o644,"
            " dir_fd=lib)))\n"
            "    usr = attempt(lambda: open('/usr/sandbox-was-here', 'w').close())\n"
            "    root = attempt(lambda: open('/sandbox-was-here', 'w').close())\n"
            "    scratch = attempt(lambda: open('scratch', 'w').close())\n"
            "    return ','.join([site, usr, 'refused' if root != 'ok' else 'ok', scratch])\n")
    v = _attack(mode, hook, body, "EROFS,EROFS,refused,ok")
    assert v.reward == 1.0, v.details
    assert not (Path(os.__file__).parent / "sitecustomize.py").exists()


@HOOK
@pytest.mark.parametrize("mode", MODES)
def test_no_process_spawning(mode, hook):
    """Layer: RLIMIT_NPROC of the candidate's uid. _posixsubprocess.fork_exec (what subprocess
    uses underneath, no audit event) starting a shell."""
    body = ("import _posixsubprocess\n"
            "def attack():\n"
            "    r, w = os.pipe()\n"
            "    spawn = lambda: _posixsubprocess.fork_exec([b'/bin/sh', b'-c', b'sleep 30'], [b'/bin/sh'], True,"
            " (w,), None, [], -1, -1, -1, -1, -1, -1, r, w, True, True, -1, None, None, None, -1, None, False)\n"
            "    return attempt(spawn)\n")
    v = _attack(mode, hook, body, "EAGAIN")
    assert v.reward == 1.0, v.details


DAEMON = '''
def attack():
    r, w = os.pipe()  # close-on-exec: EOF once the daemon has exec'd and its parent has exited
    if os.fork() == 0:
        os.close(r)
        os.setsid()
        if os.fork() == 0:
            os.execv("/usr/bin/sleep", ["sleep", TOKEN])
        os._exit(0)
    os.close(w)
    os.read(r, 1)
    return "started"
'''


@HOOK
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ending", ["returns", "times-out"])
def test_no_process_outlives_the_call(mode, hook, ending):
    """Layer: killing the sandbox's pid namespace (bwrap's, or the namespaces mode's).
    Forks are allowed here so that a double-forked, setsid'd daemon gets started; the candidate
    then returns, or is still running at the deadline."""
    token = f"{600 + secrets.randbelow(10**6) / 10**6:.6f}"
    body = f"TOKEN = {token!r}\n" + DAEMON
    if ending == "returns":
        v = _attack(mode, hook, body, "started", max_processes=64)
    else:
        v = _attack(mode, hook, body.replace('return "started"', 'import time; time.sleep(60)'), "started",
                    max_processes=64, wall_s=3)
    left = _processes_with(token)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert v.reason == ("pass" if ending == "returns" else "timeout"), v.details
    assert left == []


@HOOK
@pytest.mark.parametrize("mode", MODES)
def test_seccomp_refuses_kernel_interfaces(mode, hook):
    """Layer: the seccomp filter. Without it an unprivileged uid may create a user namespace (and
    so mount namespaces, a large kernel surface; in the namespaces mode the chroot refuses that
    too) and use ptrace (here on itself: PTRACE_TRACEME)."""
    if not INFO["seccomp"]:
        pytest.skip("libseccomp not installed: no seccomp filter")
    body = ("import ctypes\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "def call(fn, *args):\n"
            "    if fn(*args) != 0:\n"
            "        raise OSError(ctypes.get_errno(), fn.__name__)\n"
            "def attack():\n"
            "    userns = attempt(lambda: call(libc.unshare, 0x10000000))\n"
            "    traceme = attempt(lambda: call(libc.ptrace, 0, 0, 0, 0))\n"
            "    return userns + ',' + traceme\n")
    v = _attack(mode, hook, body, "EPERM,EPERM")
    assert v.reward == 1.0, v.details


# ----------------------------------------------------------------------------------- without isolation

@needs_root
def test_the_attacks_work_without_isolation(usr1_count, listener):
    """The same programs against the hook alone ("none"): the escape switches it off and every
    attack succeeds, which is what makes the passing tests above evidence about the OS layers."""
    harness, port = os.getpid(), listener.getsockname()[1]
    token = f"{600 + secrets.randbelow(10**6) / 10**6:.6f}"
    bodies = {
        "passwd": "def attack():\n    return attempt(lambda: open('/etc/passwd').read())\n",
        "signal": f"def attack():\n    return attempt(lambda: os.kill({harness}, signal.SIGUSR1))\n",
        "environ": f"def attack():\n    return attempt(lambda: open('/proc/{harness}/environ', 'rb').read())\n",
        "network": f"def attack():\n    return attempt(lambda: socket.create_connection(('127.0.0.1', {port})))\n",
    }
    for name, body in bodies.items():
        v = _attack("none", True, body, "ok")
        assert v.reward == 1.0, (name, v.details)
    assert usr1_count == [1] and _accepted(listener)
    v = _attack("none", True, f"TOKEN = {token!r}\n" + DAEMON, "started", max_processes=64)
    left = _processes_with(token)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert v.reward == 1.0 and len(left) == 1, v.details


def test_unisolated_mode_still_judges_and_refuses():
    """isolation="none" (explicit): rlimits + audit hook only, which still judge and name refusals."""
    none = SandboxLimits(cpu_s=1, wall_s=1.5, isolation="none")
    assert run_tests(ADD_OK, ADD, limits=none).reward == 1.0
    for code in ("print(open('/etc/passwd').read())", "import socket\nsocket.socket()",
                 "import os\nos.fork()", "import subprocess\nsubprocess.run(['true'])"):
        v = _one(code, limits=none)
        assert v.reward == 0.0 and v.reason == "violation", (code, v.details)


def test_the_mode_in_use_is_reported():
    assert INFO["mode"] == sandbox_mode() and INFO["version"] == SANDBOX_VERSION
    assert INFO["mode"] in (*ISOLATED_MODES, "none")
    assert set(INFO["unavailable"]) <= set(ISOLATED_MODES) and all(INFO["unavailable"].values())
    if INFO["mode"] != "none":
        assert INFO["mode"] not in INFO["unavailable"]


REFUSAL = r'''
import json
from posttrain.rewards.code_judge import code_execution, run_tests
from posttrain.rewards.code_sandbox import SandboxUnavailable, require_isolation, sandbox_info
ADD = [{"input": "2 3", "output": "5"}]
ADD_OK = "a, b = map(int, input().split())\nprint(a + b)\n"
out = {"info": sandbox_info()}
try:
    require_isolation(allow_unisolated=False)
except SandboxUnavailable as e:
    out["refusal"] = str(e)
out["reward_refused"] = code_execution(["```python\n" + ADD_OK + "```"], tests=[ADD])
out["verdict_refused"] = run_tests(ADD_OK, ADD).reason
out["allowed"] = require_isolation(allow_unisolated=True)
out["verdict_allowed"] = run_tests(ADD_OK, ADD).reason
print(json.dumps(out))
'''


@needs_root
def test_without_isolation_code_rewards_refuse_until_opted_in():
    """A real process that cannot isolate: root with every capability dropped (bwrap needs
    CAP_SYS_ADMIN as root, the namespaces mode too), bwrap still on PATH."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) not installed")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([setpriv, "--inh-caps=-all", "--bounding-set=-all", "--", sys.executable, "-c", REFUSAL],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["info"]["mode"] == "none" and set(out["info"]["unavailable"]) == set(ISOLATED_MODES)
    assert "apt-get install bubblewrap" in out["refusal"] and "unsafe_allow_unisolated" in out["refusal"]
    assert out["reward_refused"] == [0.0] and out["verdict_refused"] == "no_isolation"
    assert out["allowed"] == "none" and out["verdict_allowed"] == "pass"
