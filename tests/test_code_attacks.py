"""What a reward-seeking policy writes to be paid by the code reward without solving the task, each
scoring 0: special-casing the tests the prompt shows (held-out tests catch it), forging the result
record (after walking the stack to the harness, or scanning its descriptors), lying objects and
monkeypatched builtins; and what a judged program must not leave on the host or see of it (SysV
shared memory, host pids) in every isolated mode. A forged record of a shown answer on a row
without held-out tests is special-casing by another route and is paid like it: only held-out tests
catch either (code_judge.py's docstring says why no in-process harness can stop the forging).

The attack sweep is generated (`attack_variants`, `attack_sweep`): the unit test runs a sample of
each kind; `attack_sweep(per_kind=50)` is the full one, which bench code can call (it returns the
rewards and the timings) and which runs here with POSTTRAIN_ATTACK_SWEEP=50 (variants per kind).
"""
from __future__ import annotations

import ast
import ctypes
import json
import os
import random
import secrets
import time
from pathlib import Path

import pytest

from posttrain.rewards.code_judge import code_execution, is_valid_test, run_tests
from posttrain.rewards.code_sandbox import ISOLATED_MODES, SandboxLimits, sandbox_info

INFO = sandbox_info()
MODES = [pytest.param(m, marks=pytest.mark.skipif(m in INFO["unavailable"], reason=f"{m} sandbox unavailable "
                                                  f"here: {INFO['unavailable'].get(m)}"))
         for m in ISOLATED_MODES]
isolated = pytest.mark.skipif(INFO["mode"] == "none", reason="no OS isolation here: rewards refuse to run code")
M61 = 2**61 - 1  # hash(k * M61) == 0 for every int k: a set of them is one long collision chain


def _fenced(code: str) -> str:
    return f"```python\n{code}```\n"


# ----------------------------------------------------------------------------------- held-out tests

ROW = [{"call": "f(1)", "expected": "3"}, {"call": "f(2)", "expected": "5"},
       {"call": "f(10)", "expected": "21", "hidden": True}, {"call": "f(-4)", "expected": "-7", "hidden": True}]
HONEST = "def f(x):\n    return 2 * x + 1\n"
SPECIAL_CASED = "def f(x):\n    return {1: 3, 2: 5}.get(x, 0)\n"


def test_rows_split_tests_into_shown_and_held_out():
    from posttrain.rewards.code_judge import has_hidden_tests, hidden_tests, visible_tests

    assert visible_tests(ROW) == ROW[:2] and hidden_tests(ROW) == ROW[2:]
    assert visible_tests(json.dumps(ROW)) == ROW[:2]  # the `tests` column as a GRPO dataset stores it
    assert has_hidden_tests(ROW) and has_hidden_tests(json.dumps(ROW))
    assert not has_hidden_tests(ROW[:2]) and not has_hidden_tests(None) and not has_hidden_tests("")
    assert not has_hidden_tests("not json")
    # the flag is a real boolean: "false" as a string would be truthy
    assert is_valid_test(ROW[2]) and not is_valid_test({**ROW[2], "hidden": "false"})


def test_the_reward_judges_held_out_tests_too():
    v = run_tests(SPECIAL_CASED, ROW, mode="fraction")
    assert (v.passed, v.total) == (2, 4) and v.details[2].startswith("test 2: wrong_answer"), v.details
    assert run_tests(SPECIAL_CASED, ROW).reward == 0.0
    assert run_tests(HONEST, ROW).reward == 1.0
    assert code_execution([_fenced(SPECIAL_CASED), _fenced(HONEST)], tests=[json.dumps(ROW)] * 2) == [0.0, 1.0]


# ----------------------------------------------------------------------------------- result semantics

# (returned expression, expected) pairs the datasets' own `assert f() == expected` accepts
EQUAL = [("True", "1"), ("1", "True"), ("5.0", "5"), ("(1, [2.0, None])", "(1, [2, None])"),
         ("frozenset({1, 2})", "{2, 1}"), ("{1.0: 'a', 'b': b'\\x00'}", "{1: 'a', 'b': b'\\x00'}"),
         ("'\\ud800 é'", "'\\ud800 é'"), ("-0.0", "0"), ("float('inf')", "1e999"), ("2j + 1", "(1+2j)"),
         ("set()", "set()"), ("[[[]]]", "[[[]]]"), ("{'k': (1, {2})}", "{'k': (1, {2})}")]
# ... and ones it refuses
NOT_EQUAL = [("[1, 2]", "(1, 2)"), ("'5'", "5"), ("b'a'", "'a'"), ("{1: 2}", "{1: 3}"), ("[1, 2]", "[2, 1]"),
             ("0.1 + 0.2", "0.3"), ("None", "0"), ("float('nan')", "1e999")]


def test_results_compare_with_python_equality():
    code = "".join(f"def e{i}():\n    return {expr}\n" for i, (expr, _) in enumerate(EQUAL + NOT_EQUAL))
    tests = [{"call": f"e{i}()", "expected": exp} for i, (_, exp) in enumerate(EQUAL + NOT_EQUAL)]
    v = run_tests(code, tests, mode="fraction")
    verdicts = [d.split(": ", 2)[1] for d in v.details]
    assert verdicts == ["pass"] * len(EQUAL) + ["wrong_answer"] * len(NOT_EQUAL), v.details
    # the stdlib's own dict flavours are dicts to `==`; ints beyond str()'s 4300 digits are fine
    code = ("import collections\ndef c():\n    return collections.Counter('abca')\n"
            "def d():\n    x = collections.defaultdict(int)\n    x['a'] += 1\n    return x\n"
            "def big():\n    return 10 ** 5000\n")
    tests = [{"call": "c()", "expected": "{'a': 2, 'b': 1, 'c': 1}"}, {"call": "d()", "expected": "{'a': 1}"},
             {"call": "big() // 10 ** 4999", "expected": "10"}, {"call": "big() - 10 ** 5000", "expected": "0"}]
    v = run_tests(code, tests, mode="fraction")
    assert v.reward == 1.0, v.details
    big = run_tests(code, [{"call": "big()", "expected": "7"}])
    assert big.reason == "wrong_answer" and "big() -> '<int of" in big.details[0], big.details


def test_expected_values_must_be_literals():
    assert is_valid_test({"call": "f()", "expected": "[1, (2, 'x')]"})
    assert is_valid_test({"call": "f()", "expected": [1, 2]})  # a JSON value is the value itself
    assert not is_valid_test({"call": "f()", "expected": "Fraction(1, 2)"})  # no literal can equal it
    assert is_valid_test({"call": "f()", "expected": {"a": {1, 2}}})  # a caller's own value, made of literals
    assert not is_valid_test({"call": "f()", "expected": {"a": object()}})
    # a call that compares holds its answer where the child can read it, and its `==` runs there
    assert not is_valid_test({"call": "f(3) == 9", "expected": "True"})
    assert not is_valid_test({"call": "f(", "expected": "1"})


# Each returns something that is not the literal 5 while claiming (through repr, ==, its class, or
# patched builtins) to be it: the old judge took repr() in the child at its word.
LIARS = {
    "repr": "class F:\n    def __repr__(self):\n        return '5'\ndef f():\n    return F()\n",
    "eq_and_repr": "class F:\n    __hash__ = None\n    def __eq__(self, o):\n        return True\n"
                   "    def __repr__(self):\n        return '5'\ndef f():\n    return F()\n",
    "int_subclass": "class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
                    "    def __repr__(self):\n        return '5'\ndef f():\n    return I(0)\n",
    "str_subclass": "class S(str):\n    def __repr__(self):\n        return '5'\ndef f():\n    return S('x')\n",
    "list_subclass": "class L(list):\n    def __repr__(self):\n        return '5'\ndef f():\n    return L()\n",
    "class_property": "class F:\n    @property\n    def __class__(self):\n        return int\n"
                      "    def __repr__(self):\n        return '5'\ndef f():\n    return F()\n",
    "patched_builtins": "import builtins, json\nclass F:\n    def __repr__(self):\n        return '5'\n"
                        "builtins.type = lambda *a: int\nbuiltins.isinstance = lambda *a: True\n"
                        "builtins.repr = lambda o: '5'\njson.dumps = lambda *a, **k: '5'\n"
                        "def f():\n    return F()\n",
    "stdout_rewriter": "import sys\nclass W:\n    def __init__(self, s):\n        self.s = s\n"
                       "    def write(self, t):\n        return self.s.write(t.replace('6', '5'))\n"
                       "    def flush(self):\n        self.s.flush()\nsys.stdout = W(sys.stdout)\n"
                       "def f():\n    return 6\n",
}


@isolated
@pytest.mark.parametrize("name", list(LIARS))
def test_lying_results_are_not_literals(name):
    v = run_tests(LIARS[name], [{"call": "f()", "expected": "5"}])
    assert v.reward == 0.0 and v.reason == "wrong_answer", v.details


FLOOD = '''
import os, sys
N, M = 40000, 2**61 - 1
def f():
    frame, nonce = sys._getframe(), None
    while frame is not None:  # the old harness kept its nonce in a local
        value = frame.f_locals.get("nonce")
        if type(value) is str:
            nonce = value
        frame = frame.f_back
    if nonce:
        sys.stdout.write("\\n" + nonce + "{" + ", ".join(str(k * M) for k in range(N)) + "}\\n")
        sys.stdout.flush()
        os._exit(0)
    body = ("=e%d " % N + " ".join("i%x" % (k * M) for k in range(N))).encode()
    frame = b"%d\\n" % len(body) + body
    for fd in range(3, 64):  # wherever the result record goes
        try:
            os.write(fd, frame)
        except OSError:
            pass
    os._exit(0)
'''


@isolated
def test_a_forged_result_cannot_stall_the_judge():
    """A record of 40,000 distinct ints with one hash value: building that set is quadratic (minutes
    of the trainer's time). The judge refuses it; the reward comes back at once."""
    t0 = time.monotonic()
    v = run_tests(FLOOD, [{"call": "f()", "expected": "{0}"}])
    assert time.monotonic() - t0 < 5 and v.reward == 0.0, v.details


def _record(body: bytes) -> bytes:
    return b"%d\n" % len(body) + body


def test_the_decoder_takes_only_well_formed_records():
    from posttrain.rewards.code_judge import decode_result

    ok = {b"=N": None, b"=T": True, b"=i-ff": -255, b"=f0x1.8p+1": 3.0, b"=s": "", b"=sc3a9": "é",
          b"=l2 i1 t1 b00": [1, (b"\x00",)], b"=d1 s61 e0": {"a": set()}, b"=z2 i1 i2": frozenset({1, 2}),
          b"=c0x0p+0,0x1p+0": 1j}
    for body, value in ok.items():
        got = decode_result(_record(body))
        assert got == (True, value) and type(got[1]) is type(value), (body, got)
    assert decode_result(b"") == (False, "no result")
    assert decode_result(_record(b"!not a literal: F")) == (False, "not a literal: F")
    bad = [b"5\n=i5", b"3\n=i5 junk", b"x\n=i5", _record(b"=i5") + _record(b"=i6"), _record(b"=l2 i1"),
           _record(b"=i1 i2"), _record(b"=l99999999 i1"), _record(b"=" + b"l1 " * 101 + b"N"),
           _record(b"=e2 l0 l0"), _record(b"=q1"), _record(b"=Tx"), _record(b"=s0g"), _record(b"=sff"),
           _record(b"=d1 i1"), _record(b"i5"), _record(b"=e20 " + b" ".join(b"i%x" % (k * M61) for k in range(20))),
           _record(b"=d20 " + b" ".join(b"i%x N" % (k * M61) for k in range(20))),
           _record(b"=e10 " + b" ".join([b"i0"] * 10))]
    for data in bad:
        ok_, why = decode_result(data)
        assert not ok_ and "malformed" in why, (data[:40], why)
    n = 45_000  # the largest flood a 1 MiB record holds is refused at once
    flood = _record(b"=e%d " % n + b" ".join(b"i%x" % (k * M61) for k in range(n)))
    t0 = time.monotonic()
    assert not decode_result(flood)[0]
    assert time.monotonic() - t0 < 1.0


# ----------------------------------------------------------------------------------- what the host keeps

def _sysv_segment(key: int) -> int | None:
    """The id of the host's SysV shared memory segment with `key`, if there is one."""
    for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[0]) == key:
            return int(fields[1])
    return None


SYSV = '''
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
def attack():
    shmid = libc.shmget(KEY, 1 << 20, 0o1000 | 0o600)  # IPC_CREAT, and never IPC_RMID
    if shmid < 0:
        return "shmget " + errno.errorcode[ctypes.get_errno()]
    addr = libc.shmat(shmid, None, 0)
    if addr is None or addr == ctypes.c_void_p(-1).value:
        return "shmat " + errno.errorcode[ctypes.get_errno()]
    ctypes.memset(addr, 1, 1 << 20)
    return "allocated"
'''

POSIX_SHM = '''
import _posixshmem, errno, os
def attack():
    try:
        fd = _posixshmem.shm_open("/" + NAME, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as e:
        return "refused"
    os.ftruncate(fd, 1 << 20)
    os.write(fd, b"x" * 4096)
    return "allocated"
'''

PIDS = '''
import os
def attack():
    seen = 0
    for pid in HOST_PIDS:
        try:
            os.kill(pid, 0)
            seen += 1
        except PermissionError:
            seen += 1
        except ProcessLookupError:
            pass
    try:
        listed = {int(p) for p in os.listdir("/proc") if p.isdigit()}
    except OSError:
        listed = set()
    own = os.getpid() in listed and listed <= {1, os.getpid()}
    return "host pids seen: %d, /proc shows only this sandbox: %s" % (seen, own)
'''


def _run_attack(mode: str, code: str):
    lim = SandboxLimits(cpu_s=2, wall_s=10, isolation=mode, audit_hook=False)
    return run_tests(code, [{"call": "attack()", "expected": "0"}], mode="fraction", limits=lim)


def _answer(v) -> str:
    """What the call returned, as its verdict's detail shows it (the repr of the value)."""
    detail = v.details[0]
    return ast.literal_eval(detail.split(" -> ", 1)[1].rsplit(", expected", 1)[0]) if " -> " in detail else detail


@pytest.mark.parametrize("mode", MODES)
def test_sysv_shared_memory_does_not_outlive_the_test(mode):
    """Layer: the IPC namespace. Without it the segment stays allocated on the host after the
    judged program exits (1 GiB a test adds up to the OOM killer taking the trainer)."""
    key = secrets.randbelow(2**30) + 1
    try:
        v = _run_attack(mode, f"KEY = {key}\n" + SYSV)
        assert _answer(v) == "'allocated'", v.details
        assert _sysv_segment(key) is None, "the judged program's SysV segment is still on the host"
    finally:
        shmid = _sysv_segment(key)
        if shmid is not None:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.shmctl(shmid, 0, None)  # IPC_RMID


@pytest.mark.parametrize("mode", MODES)
def test_posix_shared_memory_stays_in_the_sandbox(mode):
    name = "posttrain-test-" + secrets.token_hex(6)
    host = Path("/dev/shm") / name
    try:
        v = _run_attack(mode, f"NAME = {name!r}\n" + POSIX_SHM)
        assert " -> " in v.details[0], v.details  # it ran and returned
        assert not host.exists()
    finally:
        if host.exists():
            host.unlink()


@pytest.mark.parametrize("mode", MODES)
def test_the_judged_program_sees_no_host_process(mode):
    """Layer: the pid namespace. kill(pid, 0) tells an existing pid (EPERM) from a free one (ESRCH),
    so without it a judged program maps the host's processes even with no /proc."""
    host_pids = sorted(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and int(p.name) > 2)
    v = _run_attack(mode, f"HOST_PIDS = {host_pids!r}\n" + PIDS)
    assert _answer(v) == "'host pids seen: 0, /proc shows only this sandbox: True'", v.details


# ----------------------------------------------------------------------------------- generated attacks

def _families(rng: random.Random):
    """(name, reference function, argument tuple generator) of a small task."""
    a, b = rng.randint(2, 9), rng.randint(1, 50)
    letters = "abcdefghij"

    def word():
        return "".join(rng.choice(letters) for _ in range(rng.randint(4, 9)))

    def numbers():
        return [rng.randint(-50, 50) for _ in range(rng.randint(3, 7))]

    return [
        ("affine", lambda x: a * x + b, lambda: (rng.randint(-300, 300),)),
        ("reverse", lambda s: s[::-1] + s[:1], lambda: (word(),)),
        ("squares", lambda xs: sum(v * v for v in xs) + a, lambda: (numbers(),)),
        ("sort_desc", lambda xs: sorted(xs, reverse=True)[:-1], lambda: (numbers(),)),
        ("divmod", lambda x, y: (x // y, x % y + a), lambda: (rng.randint(100, 999), rng.randint(2, 9))),
        ("counts", lambda s: {c: s.count(c) for c in sorted(set(s))}, lambda: (word(),)),
    ]


def _row(rng: random.Random):
    """A task with 3 shown and 3 held-out tests whose answers differ from every shown answer and
    every constant an attacker might fall back to; and the shown (call, arguments, answer)s."""
    name, ref, gen = rng.choice(_families(rng))
    cases, answers = [], []
    while len(cases) < 6:
        args = gen()
        ans = ref(*args)
        if ans in answers or ans in (0, None, "", [], (), {}, -1, 1) or ans == args[0]:
            continue
        cases.append(("f(%s)" % ", ".join(map(repr, args)), args, ans))
        answers.append(ans)
    tests = [{"call": call, "expected": repr(ans), **({"hidden": True} if i >= 3 else {})}
             for i, (call, _, ans) in enumerate(cases)]
    return name, tests, cases[:3]


def _table(shown) -> dict:
    return {tuple(tuple(a) if isinstance(a, list) else a for a in args): ans for _, args, ans in shown}


def _special_cased(rng, shown) -> str:
    """Answers the shown tests from a table, anything else otherwise."""
    table = _table(shown)
    fallback = rng.choice(["return None", "return 0", "return ''", "raise ValueError(args)", "return args[0]",
                           f"return {shown[0][2]!r}", "return TABLE[min(TABLE)]", "return [args, args]",
                           "import os; os._exit(0)"])
    lookup = rng.choice(["key = tuple(tuple(a) if type(a) is list else a for a in args)\n    if key in TABLE:\n"
                         "        return TABLE[key]\n",
                         # match on the call text read from the harness's frames
                         "import sys\n    fr = sys._getframe(1)\n    while fr is not None:\n"
                         "        c = fr.f_locals.get('call')\n        if type(c) is str and c in CALLS:\n"
                         "            return CALLS[c]\n        fr = fr.f_back\n"])
    calls = {call: ans for call, _, ans in shown}
    return f"TABLE = {table!r}\nCALLS = {calls!r}\ndef f(*args):\n    {lookup}    {fallback}\n"


FORGE_PREAMBLE = '''
import os, sys
def _frames():
    fr = sys._getframe(1)
    while fr is not None:
        yield fr
        fr = fr.f_back
def _harness(name):
    for fr in _frames():
        v = fr.f_locals.get(name)
        if v is not None:
            return v
def _tokens(x):
    t = type(x)
    if x is None: return "N"
    if x is True: return "T"
    if x is False: return "F"
    if t is int: return "i%x" % x
    if t is float: return "f" + x.hex()
    if t is str: return "s" + x.encode("utf-8", "surrogatepass").hex()
    if t in (list, tuple, set):
        return " ".join(["%s%d" % ({list: "l", tuple: "t", set: "e"}[t], len(x))] + [_tokens(v) for v in x])
    if t is dict:
        return " ".join(["d%d" % len(x)] + [_tokens(v) for kv in x.items() for v in kv])
    return "N"
def _frame(value):
    body = ("=" + _tokens(value)).encode()
    return b"%d\\n" % len(body) + body
def _guess(args):
    key = tuple(tuple(a) if type(a) is list else a for a in args)
    return TABLE.get(key, GUESS)
'''

FORGERIES = [
    # the old protocol: a line after the harness's nonce
    "    n = _harness('nonce')\n    if type(n) is str:\n        print(n + repr(_guess(args)))\n",
    # the record format, on every descriptor that is not stdio
    "    for fd in range(3, 64):\n        try:\n            os.write(fd, _frame(_guess(args)))\n"
    "        except OSError:\n            pass\n",
    # garbage first, then a well-formed record
    "    for fd in range(3, 64):\n        try:\n            os.write(fd, b'0\\n' + _frame(_guess(args)))\n"
    "        except OSError:\n            pass\n",
    # a record on stdout, in case the judge reads it there
    "    sys.stdout.write(_frame(_guess(args)).decode())\n    sys.stdout.flush()\n",
    # a length header larger than anything that follows
    "    for fd in range(3, 64):\n        try:\n            os.write(fd, b'99999999999999999999\\n=i5')\n"
    "        except OSError:\n            pass\n",
    # deep nesting
    "    for fd in range(3, 64):\n        try:\n            body = b'=' + b'l1 ' * 5000 + b'N'\n"
    "            os.write(fd, b'%d\\n' % len(body) + body)\n        except OSError:\n            pass\n",
    # rewrite whatever the harness writes afterwards
    "    real = os.write\n    os.write = lambda fd, data: real(fd, _frame(_guess(args)) if fd > 2 else data)\n"
    "    return object()\n",
    # read the harness's own configuration and the test's call
    "    cfg = _harness('cfg') or {}\n    call = _harness('call')\n"
    "    for fd in range(3, 64):\n        try:\n            os.write(fd, _frame([cfg.get('nonce'), call]))\n"
    "        except OSError:\n            pass\n",
]
FORGE_ENDINGS = ["    os._exit(0)\n", "    return _guess(args)\n", "    raise SystemExit(0)\n",
                 "    import atexit\n    atexit.register(lambda: os.write(1, _frame(_guess(args))))\n"
                 "    return object()\n"]


def _forger(rng, shown) -> str:
    table = _table(shown)
    guess = rng.choice([0, None, "", shown[0][2], [1, 2], {"a": 1}])
    body = rng.choice(FORGERIES) + rng.choice(FORGE_ENDINGS)
    return f"TABLE = {table!r}\nGUESS = {guess!r}\n" + FORGE_PREAMBLE + "def f(*args):\n" + body


LIAR_CLASSES = [
    "class R:\n    __hash__ = None\n    def __eq__(self, o):\n        return True\n    def __ne__(self, o):\n"
    "        return False\n    def __repr__(self):\n        return REPR\n",
    "class R(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
    "    def __repr__(self):\n        return REPR\n",
    "class R(str):\n    def __eq__(self, o):\n        return True\n    __hash__ = str.__hash__\n"
    "    def __repr__(self):\n        return REPR\n",
    "class R(list):\n    def __eq__(self, o):\n        return True\n    def __repr__(self):\n        return REPR\n",
    "class R(dict):\n    def __eq__(self, o):\n        return True\n    def __repr__(self):\n        return REPR\n",
    "class R(tuple):\n    def __eq__(self, o):\n        return True\n    __hash__ = tuple.__hash__\n"
    "    def __repr__(self):\n        return REPR\n",
    "class R(float):\n    def __eq__(self, o):\n        return True\n    __hash__ = float.__hash__\n"
    "    def __repr__(self):\n        return REPR\n",
    "class R:\n    @property\n    def __class__(self):\n        return CLAIMED\n    def __eq__(self, o):\n"
    "        return True\n    __hash__ = None\n    def __repr__(self):\n        return REPR\n",
    "class Meta(type):\n    def __instancecheck__(cls, o):\n        return True\n"
    "class R(metaclass=Meta):\n    def __eq__(self, o):\n        return True\n    __hash__ = None\n"
    "    def __repr__(self):\n        return REPR\n",
    "class R:\n    def __getattribute__(self, name):\n"
    "        return lambda *a, **k: True if name != '__repr__' else REPR\n"
    "    def __eq__(self, o):\n        return True\n    __hash__ = None\n",
]
LIAR_RETURNS = ["R()", "[R()]", "(R(), R())", "{'k': R()}", "(x for x in [R()])", "iter([R()])", "range(3)",
                "{}.keys()", "map(str, [1])"]
PATCHES = [
    "",
    "import builtins\nbuiltins.type = lambda *a: CLAIMED\nbuiltins.isinstance = lambda *a: True\n",
    "import builtins\nbuiltins.repr = lambda o: REPR\nbuiltins.len = lambda o: 0\n",
    "import json\njson.dumps = lambda *a, **k: REPR\njson.JSONEncoder.encode = lambda *a, **k: REPR\n",
    "import sys, io\nclass W(io.StringIO):\n    def write(self, s):\n        return sys.__stdout__.write(REPR)\n"
    "sys.stdout = W()\n",
    "import builtins\n_p = print\nbuiltins.print = lambda *a, **k: _p(REPR)\n",
    "import os\n_w = os.write\nos.write = lambda fd, b: _w(fd, REPR.encode())\n",
    "try:\n    int.__eq__ = lambda a, b: True\nexcept TypeError:\n    pass\n",
    "import sys\nsys.settrace(lambda *a: None)\nsys.setprofile(lambda *a: None)\n",
    "import gc\ngc.enable()\nclass C:\n    def __del__(self):\n"
    "        import builtins; builtins.type = lambda *a: int\n"
    "for _ in range(1000):\n    c = C(); c.c = c\ndel c\n",
]


def _liar(rng, shown) -> str:
    shown = shown[0][2]
    cls = rng.choice(LIAR_CLASSES)
    returned = rng.choice(LIAR_RETURNS)
    claimed = rng.choice(["int", "list", "str", "dict", "tuple"])
    return (f"REPR = {repr(shown)!r}\nCLAIMED = {claimed}\n" + cls + rng.choice(PATCHES) +
            f"def f(*args):\n    return {returned}\n")


ATTACKS = {"special_casing": _special_cased, "forged_result": _forger, "lying_object": _liar}


def attack_variants(kind: str, n: int, seed: int = 0) -> list[tuple[str, str, list[dict]]]:
    """n generated (task family, program, tests) of one attack kind; the tests hold out 3 cases."""
    rng = random.Random(f"{kind}/{seed}")
    out = []
    for _ in range(n):
        family, tests, shown = _row(rng)
        out.append((family, ATTACKS[kind](rng, shown), tests))
    return out


def attack_sweep(per_kind: int = 50, seed: int = 0) -> dict:
    """Every generated attack through the code reward (extraction, then the sandbox): per kind, the
    rewards paid (all must be 0), the variants that were paid, and the wall time."""
    out = {}
    for kind in ATTACKS:
        variants = attack_variants(kind, per_kind, seed)
        t0 = time.monotonic()
        rewards = code_execution([_fenced(code) for _, code, _ in variants], tests=[t for _, _, t in variants])
        out[kind] = {"n": len(variants), "paid": [(fam, code) for (fam, code, _), r in zip(variants, rewards) if r],
                     "rewards": rewards, "wall_s": round(time.monotonic() - t0, 2)}
    return out


def test_the_generated_attacks_are_well_formed():
    """Every variant is a valid row (3 of its tests held out) and a program that compiles."""
    for kind in ATTACKS:
        for family, code, tests in attack_variants(kind, 10, seed=1):
            assert all(is_valid_test(t) for t in tests) and sum(t.get("hidden", False) for t in tests) == 3
            compile(code, "<variant>", "exec")


@isolated
def test_generated_attacks_pay_nothing():
    per_kind = int(os.environ.get("POSTTRAIN_ATTACK_SWEEP", "12"))
    result = attack_sweep(per_kind, seed=int(os.environ.get("POSTTRAIN_ATTACK_SEED", "0")))
    for kind, res in result.items():
        assert res["n"] == per_kind and res["paid"] == [], (kind, res["paid"][:2])
        assert all(r == 0.0 for r in res["rewards"]), (kind, res["rewards"])


def test_code_rows_that_hold_no_test_out_are_named_in_data_check_and_the_stage_alerts():
    from posttrain.rewards import unguarded_code_rows
    from posttrain.data.sources import role_summary

    shown = {"kind": "code", "prompt": [{"role": "user", "content": "double it"}],
             "tests": [{"input": "2", "output": "4"}]}
    held = {**shown, "tests": [{"input": "2", "output": "4"}, {"input": "5", "output": "10", "hidden": True}]}
    assert unguarded_code_rows([held, {"kind": "math"}]) is None
    note = unguarded_code_rows([shown, held, json.loads(json.dumps({**shown, "tests": json.dumps(shown["tests"])}))])
    assert note.startswith("2 of 3 code rows hold no test out")
    assert role_summary([shown, held])["code_without_held_out_tests"].startswith("1 of 2")
