"""Test helper: wait until the math verifier's sympy worker answers (a cold start under load is a
timeout, not a verdict)."""
import time

import pytest

from posttrain.rewards.math import verify_math


def wait_worker_ready(timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if verify_math("\\boxed{\\cos(0)}", "1").reason == "match":
            return
        time.sleep(0.05)
    pytest.fail("sympy worker never became ready")
