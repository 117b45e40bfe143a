"""Test helper: wait until the math verifier's sympy worker answers (a cold start under load is a
timeout, not a verdict)."""
import itertools
import time

import pytest

from posttrain.rewards.math import verify_math

_PROBES = itertools.count(1)


def wait_worker_ready(timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        # A question never asked before: verify_math remembers its verdicts, so a repeated probe
        # would be answered from memory, worker or not.
        k = next(_PROBES)
        if verify_math(f"\\boxed{{\\cos^2({k}\\pi)}}", "\\sin(\\pi/2)").reason == "match":
            return
        time.sleep(0.05)
    pytest.fail("sympy worker never became ready")
