"""Limits of the math verifier: the size limits checked before any exact or CAS work, the one
deadline that covers a whole verify_math call, and the exceptions that end a verdict early."""
from __future__ import annotations

import threading
import time

TIME_BUDGET_S = 0.85  # whole verify_math call, worker included
MAX_RAW_ANSWER = 3000  # characters of a box content / gold string
MAX_CLEAN = 1200  # characters after normalisation
MAX_DEPTH = 40  # bracket nesting
MAX_BITS = 40_000  # bit length of any exact integer we build
MAX_EXPONENT = 100_000  # |integer exponent| on a non-trivial base
MAX_FACTORIAL = 3000
MAX_POLY_POWER = 40  # integer power of a sum
MAX_TERMS = 3000  # terms of an expanded polynomial
MAX_ELEMENTS = 64  # elements of a list / set / tuple
MAX_NODES = 600  # AST nodes sent to sympy


class Unparsable(Exception):
    """Not a value this verifier reads (unparsable_response, or unparsable_gold for a gold)."""


class TooExpensive(Exception):
    """Over a size limit: refused before any costly exact or CAS work (too_expensive)."""


class Unsupported(Exception):
    """The pure-Python canonical form cannot decide this expression."""


class Undefined(Exception):
    """Division by zero and the like: the expression has no value."""


class Timeout(Exception):
    """The call's deadline has passed (timeout)."""


class Hedged(Unparsable):
    """Two different values given as one answer (``x = 4 = 3``): a hedge in a response, an
    unparsable gold."""


# One deadline per verify_math call, armed for this thread while the call runs: the parser, the
# canonical form, the box scan and every comparison check it (tick), not only the sympy worker.
_ACTIVE = threading.local()


def tick() -> None:
    d = getattr(_ACTIVE, "deadline", None)
    if d is not None and time.monotonic() > d.t:
        raise Timeout()


class Deadline:
    """A point in time (monotonic clock) that a call must finish by."""

    __slots__ = ("t",)

    def __init__(self, budget: float = TIME_BUDGET_S):
        self.t = time.monotonic() + budget

    def left(self) -> float:
        return self.t - time.monotonic()


class armed:
    """Arm a fresh deadline of ``budget`` seconds for this thread (what tick checks)."""

    def __init__(self, budget: float):
        self.deadline = Deadline(budget)

    def __enter__(self) -> Deadline:
        self.prev = getattr(_ACTIVE, "deadline", None)
        _ACTIVE.deadline = self.deadline
        return self.deadline

    def __exit__(self, *exc) -> None:
        _ACTIVE.deadline = self.prev


def current_deadline() -> Deadline:
    """The armed deadline, or a fresh one outside verify_math (check_gold parses without one)."""
    return getattr(_ACTIVE, "deadline", None) or Deadline()
