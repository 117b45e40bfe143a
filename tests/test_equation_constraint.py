"""The `equation` constraint (posttrain.rewards.equation): every equation a reply states holds, and
it states one; with the reference-answer guard, the open kind's independent check."""
import pytest

from posttrain.chat import assemble_response
from posttrain.rewards import verify_row
from posttrain.rewards.equation import check_equation, equations
from posttrain.rewards.instruction import validate_constraints

ROW = {"kind": "open", "answer": "46", "constraints": [{"type": "equation"}],
       "prompt": "State the sum of 12 and 34 as an equation."}
TRACE = "12+34: 2+4=6, write 6; 1+3=4, write 4; so 46"


@pytest.mark.parametrize("text, holds", [
    ("12 + 34 = 46", True), ("46 = 34 + 12.", True), ("12+34=46=40+6", True), ("3 × 4 - 2 = 10", True),
    ("-5 + 7 = 2", True), ("2 - -3 = 5", True), ("1.5 + 2 = 3.5", True), ("１２ + ３４ = ４６", True),
    ("12 x 3 = 36", True), ("10 / 4 = 2.5", True),
    ("12 + 46 = 34", False), ("12 + 34 = 46, 12 + 46 = 34", False), ("8 / 0 = 1", False),
    ("12 + 34 = 46 and 12.0 + 46 = 34", False), ("2 + 3 × 4 = 20", False),
    ("The answer is 46.", False), ("46 = 46", False), ("", False), ("=", False), ("12 + = 46", False),
])
def test_an_equation_holds_only_when_every_stated_one_is_true(text, holds):
    assert check_equation(text, {"type": "equation"}) is holds


@pytest.mark.parametrize("answer, score, reason", [
    ("12 + 34 = 46", 1.0, "constraints_met"), ("34 + 12 = 46", 1.0, "constraints_met"),
    ("12 + 46 = 34", 0.0, "constraints_failed"), ("The answer is \\boxed{46}.", 0.0, "constraints_failed"),
    ("40 + 6 = 46", 0.0, "guard:hedged"), ("1 + 1 = 2", 0.0, "guard:wrong_answer"),
    ("12 + 34 = 47", 0.0, "constraints_failed"),
])
def test_the_open_kinds_check_needs_the_true_equation_of_the_tasks_numbers(answer, score, reason):
    assert verify_row(assemble_response(TRACE, answer), ROW) == (score, reason)


def test_reasoning_is_not_read_only_the_answer():
    """A false equation inside the think block is working, not the stated result."""
    assert verify_row(assemble_response("12 + 46 = 34? no", "12 + 34 = 46"), ROW)[0] == 1.0


@pytest.mark.timeout(20)
def test_a_long_adversarial_reply_is_judged_without_hanging():
    for text in ("1 " * 20000 + "=", "1+" * 20000 + "1=2", ("1 = " * 5000) + "x", "9" * 5000 + "=" + "9" * 5000):
        assert check_equation(text, {}) in (True, False)
        assert isinstance(equations(text), list)


def test_the_constraint_takes_no_parameters():
    validate_constraints([{"type": "equation"}])
    with pytest.raises(ValueError, match="equation"):
        validate_constraints([{"type": "equation", "value": 3}])
