import tempfile
import time
from pathlib import Path

import pytest

from posttrain.chat import assemble_response
from posttrain.rewards import REWARDS, build_rewards
from posttrain.rewards.code_sandbox import (
    SandboxLimits, code_execution, extract_code, run_tests, sandbox_isolation,
)

ADD = [{"input": "2 3\n", "output": "5"}, {"input": "10 -4\n", "output": "6\n"}, {"input": "0 0", "output": "0"}]
ADD_OK = "a, b = map(int, input().split())\nprint(a + b)\n"
FAST = SandboxLimits(cpu_s=1, wall_s=1.5)
FULL = sandbox_isolation() == "full"
needs_full = pytest.mark.skipif(not FULL, reason="namespaces/chroot/private uid need root")


def _one(code: str, output: str = "ok", limits: SandboxLimits = FAST):
    return run_tests(code, [{"input": "", "output": output}], limits=limits)


def _private_uid_processes() -> int:
    """Processes running under a sandbox uid (>= 1e6) right now."""
    n = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid_line = next(line for line in status.read_text().splitlines() if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        n += int(uid_line.split()[1]) >= 1_000_000
    return n


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
    assert run_tests(code, [{"call": "f(1, 0)", "expected": "True"}]).reward == 0.0  # 1 is not True
    # the candidate's own prints do not disturb the returned value
    assert run_tests("def h():\n    print(99)\n    return 7\n", [{"call": "h()", "expected": "7"}]).reward == 1.0


def test_infinite_loops_are_killed_within_the_limits():
    t0 = time.monotonic()
    busy = _one("while True:\n    pass\n")
    assert busy.reward == 0.0 and busy.reason == "cpu_limit"
    sleeper = _one("import time\ntime.sleep(60)\n")
    assert sleeper.reward == 0.0 and sleeper.reason == "timeout"
    assert time.monotonic() - t0 < 2 * FAST.wall_s + 1.0


def test_fork_bomb_gets_zero_and_leaves_nothing_behind():
    bomb = "import os\nwhile True:\n    os.fork()\n"
    t0 = time.monotonic()
    v = _one(bomb)
    assert v.reward == 0.0 and v.reason == "violation", v.details
    assert time.monotonic() - t0 < FAST.wall_s + 1.0
    if FULL:  # the same bomb with the audit hook off: RLIMIT_NPROC under the private uid refuses every fork
        persistent = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
        v = _one(persistent, limits=SandboxLimits(cpu_s=1, wall_s=1.5, audit_hook=False))
        assert v.reward == 0.0 and v.reason in ("cpu_limit", "timeout")
        assert _private_uid_processes() == 0


@pytest.mark.parametrize("code", [
    "print(open('/etc/passwd').read())",
    "print(open('../../../../etc/passwd').read())",
    "import os\nprint(os.listdir('/'))",
    "import os\nos.symlink('/etc/passwd', 'p')\nprint(open('p').read())",
])
def test_reading_outside_the_sandbox_gets_zero(code):
    v = _one(code)
    assert v.reward == 0.0 and v.reason == "violation", v.details


@needs_full
def test_kernel_layers_hold_without_the_audit_hook():
    raw = SandboxLimits(cpu_s=1, wall_s=1.5, audit_hook=False)
    probe = (
        "import os, socket\n"
        "try:\n    socket.create_connection(('127.0.0.1', 22), timeout=0.5); print('net')\n"
        "except OSError:\n    print('no-net')\n"
        "print('passwd' if os.path.exists('/etc/passwd') else 'no-passwd')\n"
        "try:\n    os.setuid(0); print('root')\n"
        "except OSError:\n    print('no-root')\n"
    )
    v = _one(probe, output="no-net\nno-passwd\nno-root", limits=raw)
    assert v.reward == 1.0, v.details


def test_opening_a_socket_gets_zero():
    code = ("import socket\ns = socket.socket()\ntry:\n    s.connect(('127.0.0.1', 22))\n"
            "except OSError:\n    pass\nprint('ok')\n")
    v = _one(code)
    assert v.reward == 0.0 and v.reason == "violation" and "socket" in v.details[0]


@pytest.mark.parametrize("code", ["x = bytearray(10**10)\nprint('ok')",
                                  "xs = []\nwhile True:\n    xs.append(bytearray(2**20))"])
def test_unbounded_allocation_gets_zero(code):
    v = _one(code, limits=SandboxLimits(cpu_s=2, wall_s=3, memory_bytes=256 * 2**20))
    assert v.reward == 0.0 and v.reason == "memory_limit", v.details


def test_huge_output_is_cut():
    t0 = time.monotonic()
    v = _one("while True:\n    print('x' * 10000)\n", limits=SandboxLimits(output_bytes=100_000, wall_s=3))
    assert v.reward == 0.0 and v.reason == "output_limit"
    assert time.monotonic() - t0 < 2.0


def test_big_file_write_is_stopped():
    code = "with open('big', 'wb') as f:\n    while True:\n        f.write(b'z' * 2**16)\n"
    v = _one(code, limits=SandboxLimits(file_bytes=2**20, wall_s=3))
    assert v.reward == 0.0 and v.reason == "file_limit", v.details


def test_temp_dir_is_private_and_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = ("import os\nopen('scratch.txt', 'w').write('hi')\n"
            "alone = open('scratch.txt').read() == 'hi' and os.listdir('.') == ['scratch.txt']\n"
            "print('private' if alone else 'shared')\n")
    v = run_tests(code, [{"input": "", "output": "private"}] * 2)
    assert v.reward == 1.0, v.details  # the second run does not see the first run's file
    assert list(tmp_path.iterdir()) == []


def test_child_does_not_see_the_parent_environment(monkeypatch):
    monkeypatch.setenv("POSTTRAIN_SECRET_TOKEN", "hunter2")
    code = "import os\nprint('leak' if 'POSTTRAIN_SECRET_TOKEN' in os.environ or 'PATH' in os.environ else 'clean')\n"
    v = _one(code, output="clean")
    assert v.reward == 1.0, v.details


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
    assert REWARDS["code"] is code_execution
    funcs, _ = build_rewards({"code": 1.0})
    assert funcs[0].__name__ == "code_execution"


def test_basic_isolation_still_judges_and_refuses():
    """The fallback used where namespaces are unavailable (not root): rlimits + audit hook only."""
    basic = SandboxLimits(cpu_s=1, wall_s=1.5, isolation="basic")
    assert run_tests(ADD_OK, ADD, limits=basic).reward == 1.0
    for code in ("print(open('/etc/passwd').read())", "import socket\nsocket.socket()",
                 "import os\nos.fork()", "import subprocess\nsubprocess.run(['true'])"):
        v = _one(code, limits=basic)
        assert v.reward == 0.0 and v.reason == "violation", (code, v.details)
