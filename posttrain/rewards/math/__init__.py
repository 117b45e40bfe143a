"""Math answer verifier: is the final boxed answer of a response mathematically equal to the gold?

The rest of the project imports exactly these names from here.  The contract (how a verdict is
reached, every interpretation choice) and the measured accuracy and speed are in README.md next to
this file.  Modules: extract (the boxes), normalise (LaTeX / plain text), parse (the expression AST),
values (structured answers), algebra (exact canonical form), numeric (the inequality screen),
worker / worker_process (the sympy subprocess), compare (value equality), verify (the entry points),
limits (size limits, the deadline, the exceptions).

    MATH_VERIFIER_VERSION                  bump whenever a verdict can change
    Verdict(reward, reason, answer)        frozen dataclass
    extract_final_answer(response)         -> (answer | None, reason)
    verify_math(response, gold, prompt)    -> Verdict; never raises, one deadline: returns in < 1 s
    verify_stream(lines, out)              JSON-lines CLI body -> counts (bad_input lines)
    GoldAnswerError, check_gold(gold)      raise on a gold answer that cannot be parsed

``python -m posttrain.rewards.math`` runs verify_stream on stdin (exit 1 when a line was bad input).
"""
from __future__ import annotations

from posttrain.rewards.math.verify import (
    MATH_VERIFIER_VERSION, GoldAnswerError, Verdict, check_gold, extract_final_answer, verify_math, verify_stream,
)

__all__ = [
    "MATH_VERIFIER_VERSION",
    "Verdict",
    "GoldAnswerError",
    "extract_final_answer",
    "verify_math",
    "verify_stream",
    "check_gold",
]
