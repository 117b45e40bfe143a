"""The program inside the sympy worker subprocess: reads one JSON request per line ({"a": ast,
"b": ast}), answers {"r": true|false|null}.  worker.py runs this file by path (runpy, run name
``__math_verifier_worker__``), so it imports nothing from the package: only the standard library,
and sympy once it is running."""
from __future__ import annotations

import json
import os
import sys
import threading
import time


def main() -> None:
    """Serve equality requests on stdin until it closes or the parent process is gone."""
    try:
        import resource

        # a runaway simplify then fails with MemoryError instead of taking the machine's memory
        lim = 4 << 30
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    except Exception:
        pass
    # the worker goes with its parent even when the parent dies without closing our stdin
    ppid = os.getppid()

    def watch_parent():
        while True:
            time.sleep(0.5)
            if os.getppid() != ppid:
                os._exit(0)

    threading.Thread(target=watch_parent, daemon=True).start()
    import sympy

    def build(ast):
        op = ast[0]
        if op == "n":
            return sympy.Rational(ast[1], ast[2])
        if op == "s":
            return sympy.Symbol(ast[1])
        if op == "c":
            return {"pi": sympy.pi, "E": sympy.E, "I": sympy.I, "oo": sympy.oo}[ast[1]]
        if op == "+":
            return sympy.Add(*[build(a) for a in ast[1:]])
        if op == "*":
            return sympy.Mul(*[build(a) for a in ast[1:]])
        if op == "^":
            b, e = build(ast[1]), build(ast[2])
            if e.is_Rational and not e.is_Integer and e.q % 2 == 1 and b.is_number and b.is_negative:
                return sympy.real_root(b, e.q) ** e.p
            return sympy.Pow(b, e)
        if op == "root":
            x, n = build(ast[1]), build(ast[2])
            if n.is_Integer and int(n) % 2 == 1:
                return sympy.real_root(x, n)
            return sympy.root(x, n)
        if op == "!":
            return sympy.factorial(build(ast[1]))
        if op == "binom":
            return sympy.binomial(build(ast[1]), build(ast[2]))
        if op == "abs":
            return sympy.Abs(build(ast[1]))
        if op == "log":
            return sympy.log(build(ast[1]), build(ast[2]))
        if op == "f":
            fn = {"sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "cot": sympy.cot,
                  "sec": sympy.sec, "csc": sympy.csc, "arcsin": sympy.asin, "arccos": sympy.acos,
                  "arctan": sympy.atan, "arccot": sympy.acot, "sinh": sympy.sinh,
                  "cosh": sympy.cosh, "tanh": sympy.tanh, "ln": sympy.log, "log": sympy.log,
                  "exp": sympy.exp, "floor": sympy.floor, "ceil": sympy.ceiling}[ast[1]]
            return fn(build(ast[2]))
        raise ValueError(op)

    def equal(a, b):
        x, y = build(a), build(b)
        if x == y:
            return True
        if x.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan) or y.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
            return False
        d = x - y
        if d == 0:
            return True
        s = sympy.simplify(d)
        if s == 0:
            return True
        if s.is_number and s.is_zero is True:
            return True
        if s.is_number:
            try:
                if sympy.expand(sympy.radsimp(sympy.sqrtdenest(s))) == 0:
                    return True
            except Exception:
                pass
        return False

    try:  # warm sympy's caches so the first real request is not the slow one
        _x = sympy.Symbol("x")
        sympy.simplify((_x + 1) ** 2 / (_x + 1) - _x - 1 + sympy.sin(_x) ** 2 + sympy.cos(_x) ** 2 - 1)
        sympy.simplify(sympy.sqrt(3 + 2 * sympy.sqrt(2)) - 1 - sympy.sqrt(2))
    except Exception:
        pass
    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    for line in sys.stdin.buffer:
        try:
            req = json.loads(line)
            resp = {"r": bool(equal(req["a"], req["b"]))}
        except Exception as e:  # noqa: BLE001
            resp = {"r": None, "e": repr(e)[:200]}
        out.write(json.dumps(resp).encode() + b"\n")
        out.flush()


if __name__ == "__math_verifier_worker__":
    main()
