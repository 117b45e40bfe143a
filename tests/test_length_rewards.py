"""Length rewards: overlong penalties and length-aware correctness on whole replies."""
from types import SimpleNamespace

import pytest

from posttrain.chat import assemble_response
from posttrain.rewards import VERIFIER_VERSIONS, RewardSettings, build_rewards
from posttrain.rewards.length import (
    dapo_overlong_penalty, kimi_length_rewards, make_length_reward, make_overlong_reward,
)


def _resp(answer: str, pad: int = 0) -> str:
    # reasoning with content (three content words at least, `substantive`): a degenerate think block
    # earns no length bonus
    return assemble_response("worked out digit by digit: " + "step " * pad + "done", f"The answer is \\boxed{{{answer}}}.")


def test_kimi_formula_golden_group():
    # lengths 10, 20, 30, 50 -> lambda = 0.5, 0.25, 0, -0.5
    assert kimi_length_rewards([10, 20, 30, 50], [True, True, True, True]) == [0.5, 0.25, 0.0, -0.5]
    # wrong answers get min(0, lambda): the shortest wrong answer is not rewarded for being short
    assert kimi_length_rewards([10, 20, 30, 50], [False, False, False, False]) == [0.0, 0.0, 0.0, -0.5]
    assert kimi_length_rewards([10, 20, 30, 50], [True, False, True, False]) == [0.5, 0.0, 0.0, -0.5]


def test_kimi_all_equal_lengths_give_zero():
    assert kimi_length_rewards([7, 7, 7], [True, False, True]) == [0.0, 0.0, 0.0]
    assert kimi_length_rewards([], []) == []


def test_length_reward_is_per_group_with_token_lengths():
    fn = make_length_reward(num_generations=3)
    assert fn.__name__ == "length"
    answers = ["5"] * 3 + ["9"] * 3
    completions = [_resp("5"), _resp("5"), _resp("4"), _resp("9"), _resp("9"), _resp("9")]
    # group 1 lengths 10/20/30 (third wrong); group 2 lengths 1000/1000/1000. If the batch were one
    # group, group 1 would all sit near lambda = 0.5 and group 2 would get -0.5.
    ids = [[0] * 10, [0] * 20, [0] * 30, [0] * 1000, [0] * 1000, [0] * 1000]
    out = fn(completions, answer=answers, completion_ids=ids)
    assert out == [0.5, 0.0, -0.5, 0.0, 0.0, 0.0]


def test_length_reward_falls_back_to_characters_and_skips_non_math():
    fn = make_length_reward(num_generations=2)
    short, long_ = _resp("5"), _resp("5", pad=50)
    out = fn([short, long_, "Paris", "Paris, France"], answer=["5", "5", "Paris", "Paris"],
             kind=["math", "math", "direct", "direct"])
    assert out == [0.5, -0.5, None, None]


def test_wrong_answers_never_get_a_positive_length_reward():
    fn = make_length_reward(num_generations=4)
    completions = [_resp("1", pad=p) for p in (0, 3, 9, 40)]
    out = fn(completions, answer=["2"] * 4)
    assert all(r <= 0.0 for r in out) and out[-1] == -0.5


def test_length_reward_warm_up_reads_trainer_state():
    fn = make_length_reward(num_generations=2, warmup_steps=10)
    completions, answers = [_resp("5"), _resp("5", pad=20)], ["5", "5"]
    before = fn(completions, answer=answers, trainer_state=SimpleNamespace(global_step=9))
    at = fn(completions, answer=answers, trainer_state=SimpleNamespace(global_step=10))
    assert before == [0.0, 0.0]
    assert at == [0.5, -0.5]
    assert fn(completions, answer=answers, kind=["math", "direct"],
              trainer_state=SimpleNamespace(global_step=0)) == [0.0, None]


@pytest.mark.parametrize("length,expected", [
    (0, 0.0), (96, 0.0),          # up to L_max - L_cache: free
    (97, -1 / 32), (112, -0.5),   # the linear ramp
    (128, -1.0),                  # L_max itself
    (129, -1.0), (10_000, -1.0),  # beyond
])
def test_dapo_overlong_boundaries(length, expected):
    assert dapo_overlong_penalty(length, max_length=128, cache_length=32) == pytest.approx(expected)


def test_overlong_reward_uses_tokens_and_validates_settings():
    fn = make_overlong_reward(max_length=128, cache_length=32)
    assert fn.__name__ == "overlong"
    out = fn(["a", "b", "c"], completion_ids=[[1] * 50, [1] * 112, [1] * 128], kind=["math", "math", "direct"])
    assert out == [0.0, -0.5, None]
    assert fn(["x" * 112]) == [-0.5]  # characters without completion_ids
    with pytest.raises(ValueError, match="overlong cache 0"):
        make_overlong_reward(128, 0)
    with pytest.raises(ValueError, match="num_generations"):
        make_length_reward(0)


def test_build_rewards_builds_length_rewards_from_settings():
    funcs, weights = build_rewards({"correctness": 1.0, "format": 0.2, "length": 0.1, "overlong": 0.5},
                                   RewardSettings(num_generations=2, length_warmup_steps=0, max_completion_length=64,
                                                  overlong_cache=16))
    assert [f.__name__ for f in funcs] == ["correctness", "format_reward", "length", "overlong"]
    assert weights == [1.0, 0.2, 0.1, 0.5]
    assert funcs[3](["x"], completion_ids=[[0] * 56]) == [-0.5]  # L_max 64, cache 16: 8 into the ramp
    funcs, _ = build_rewards({"length": 0.0, "correctness": 1.0})
    assert [f.__name__ for f in funcs] == ["correctness"]
    with pytest.raises(ValueError, match="unknown rewards.*known: .*length"):
        build_rewards({"lenght": 1.0})
    assert {"reward/length", "reward/overlong", "code"} <= set(VERIFIER_VERSIONS)
