"""Reward functions in TRL's shape: correctness, format, mode, language consistency,
instruction following, and their weighting."""
import pytest

from posttrain.chat import assemble_response
from posttrain.rewards import build_rewards, correctness, format_reward, instruction, language_consistency
from posttrain.rewards.format import format_ok
from posttrain.rewards.instruction import check_constraint, instruction_score
from posttrain.rewards.instruction_text import count_words
from posttrain.rewards.language import language_share


def test_format_requires_one_think_block_then_one_box():
    good = assemble_response("1+2=3", "The answer is \\boxed{3}.")
    assert format_ok(good)
    assert not format_ok("The answer is \\boxed{3}.")                      # no think block
    assert not format_ok(assemble_response("1+2=3", "3"))                    # no box
    assert not format_ok(assemble_response("x", "\\boxed{3} or \\boxed{4}"))  # two boxes
    assert not format_ok(good + "<think>again</think>")                     # second block
    assert not format_ok(assemble_response("", "\\boxed{3}"))               # thinking mode needs reasoning
    assert format_ok(assemble_response("", "\\boxed{3}"), thinking=False)
    assert not format_ok(good, thinking=False)


def test_language_share_counts_cjk_characters_as_words():
    assert language_share("个位7+8=15，写5进1", "zh") == 1.0
    assert language_share("7+8=15, write 5 carry 1", "en") == 1.0
    mixed = language_share("7+8=15，write 5进1", "zh")
    assert mixed == pytest.approx(1 / 2)  # 进 vs write
    assert language_share("7+8=15", "en") is None


def test_latex_math_commands_are_markup_but_words_written_as_commands_still_count():
    assert language_share("答案是\\boxed{540}。", "zh") == 1.0
    assert language_share("所以 \\frac{1}{2} \\times 4 = 2", "zh") == 1.0
    assert language_share("所以\\five \\plus \\three", "zh") == pytest.approx(2 / 5)   # not math commands
    assert language_share("\\boxedfive", "en") == 1.0        # a command's name ends at a letter boundary


@pytest.mark.parametrize("constraint,good,bad", [
    ({"type": "json", "keys": {"answer": "int"}}, '{"answer": 3}', '{"answer": "3"}'),
    ({"type": "ends_with", "value": "done"}, "It is 3 done.", "done, it is 3"),
    ({"type": "starts_with", "value": "Answer:"}, "Answer: 3", "The Answer: 3"),
    ({"type": "uppercase"}, "TUESDAY", "Tuesday"),
    ({"type": "lowercase"}, "tuesday", "Tuesday"),
    ({"type": "max_words", "value": 2}, "\\boxed{3}", "the answer is 3"),
    ({"type": "min_words", "value": 3}, "it is three", "three"),
    ({"type": "forbidden_words", "words": ["answer"]}, "It is 3", "The Answer is 3"),
    ({"type": "forbidden_words", "words": ["答案"]}, "是3", "答案是3"),
    ({"type": "language", "language": "zh"}, "星期二", "Tuesday"),
])
def test_each_constraint_accepts_and_rejects(constraint, good, bad):
    assert check_constraint(assemble_response("", good), constraint)
    assert not check_constraint(assemble_response("", bad), constraint)


def test_no_thinking_constraint_reads_the_think_block():
    c = {"type": "no_thinking"}
    assert check_constraint(assemble_response("", "3"), c)
    assert not check_constraint(assemble_response("because", "3"), c)


def test_constraints_compose_and_never_raise():
    both = [{"type": "uppercase"}, {"type": "ends_with", "value": "OK"}]
    assert instruction_score(assemble_response("", "BLUE WHALES SING OK"), both) == 1.0
    assert instruction_score(assemble_response("", "blue whales sing OK"), both) == 0.0
    assert instruction_score(assemble_response("", "blue whales sing OK"), both, partial=True) == 0.5
    assert not check_constraint("x", {"type": "nonexistent"})
    assert not check_constraint("x", {"type": "max_words"})  # missing parameter
    assert count_words("答案是 3") == 4


def test_reward_functions_take_trl_batches_and_skip_rows_they_do_not_apply_to():
    completions = [[{"role": "assistant", "content": assemble_response("1+2=3", "\\boxed{3}")}],
                   [{"role": "assistant", "content": assemble_response("", "BLUE WHALES")}]]
    cols = dict(answer=["3", ""], kind=["math", "instruction"], thinking=[True, False], language=["en", "en"],
                constraints=["", '[{"type": "uppercase"}]'])
    assert correctness(completions=completions, **cols) == [1.0, None]
    assert format_reward(completions=completions, **cols) == [1.0, None]
    assert instruction(completions=completions, **cols) == [None, 1.0]
    assert language_consistency(completions=completions, **cols)[0] is None  # digits only: no words


def test_build_rewards_keeps_nonzero_weights_and_rejects_unknown_names():
    funcs, weights = build_rewards({"correctness": 1.0, "format": 0.0, "instruction": 0.5})
    assert [f.__name__ for f in funcs] == ["correctness", "instruction"] and weights == [1.0, 0.5]
    with pytest.raises(ValueError, match="unknown rewards"):
        build_rewards({"corectness": 1.0})


def test_mode_reward_checks_the_think_block_on_every_row_whatever_the_answer():
    from posttrain.rewards import mode

    completions = ["<think>\n</think>\n\n{\"answer\": 4}", "<think>\n2+2=4\n</think>\n\nfour",
                   "<think>\n</think>\n\nfour", "no think block at all", "<think>\nunclosed"]
    assert mode(completions, thinking=[False, True, True, False, True]) == [1.0, 1.0, 0.0, 0.0, 0.0]


def test_no_think_compliance_is_the_mode_switch_and_format_also_wants_the_box():
    from posttrain.rewards.format import mode_ok

    weekday_for_a_sum = "<think>\n\n</think>\n\n星期六"  # seen under /no_think: complies, wrong kind of answer
    assert mode_ok(weekday_for_a_sum, thinking=False)
    assert not format_ok(weekday_for_a_sum, thinking=False)
    assert not mode_ok("<think>\n15+25=40\n</think>\n\n\\boxed{40}", thinking=False)  # it thought
    assert not mode_ok("\\boxed{40}", thinking=False)  # no think block at all
