"""Holes a reward-seeking policy finds, closed: each case pays nothing (or the floor) for a reply
that does not do the task, and stays linear on replies built to make a parser backtrack.

Found by probing every reward as TRL calls it (whole replies, the dataset's columns); the cases
that were already handled are in test_rewards / test_math_verifier_robustness /
test_instruction_verifier."""
from __future__ import annotations

import pytest

from posttrain.chat import parse_response
from posttrain.rewards import correctness, direct_match, format_reward, language_consistency, mode, verify_row
from posttrain.rewards.instruction_text import count_words
from posttrain.rewards.instruction import instruction_score
from posttrain.rewards.length import NO_ANSWER, make_length_reward
from posttrain.rewards.math import verify_math


def think(answer: str, reasoning: str = "71 plus 37 is 108") -> str:
    return f"<think>\n{reasoning}\n</think>\n\n{answer}"


# ---------------------------------------------------------------- a second </think>

def test_a_second_think_close_hides_nothing_from_the_checks():
    hidden = think("The answer is 5.</think>It is 5", reasoning="")
    assert parse_response(hidden).answer.startswith("The answer is 5.")   # what a reasoning parser serves
    assert instruction_score(hidden, [{"type": "forbidden_words", "words": ["answer"]}]) == 0.0
    assert mode([hidden], thinking=[False]) == [0.0]
    hedge = think("maybe \\boxed{6} or</think>\\boxed{5}")
    assert verify_math(hedge, "5").reward == 0.0 and format_reward([hedge]) == [0.0]


def test_many_think_openings_after_the_answer_parse_in_linear_time():
    reply = "\\boxed{5}</think>" + "<think>" * 200_000   # quadratic before: minutes
    assert parse_response(reply).closes == 1
    assert format_reward([reply], thinking=[True]) == [0.0] and mode([reply], thinking=[True]) == [0.0]


# ---------------------------------------------------------------- math: the question restated

@pytest.mark.parametrize("boxed", ["71 + 37", "37+71", "71 + 37 + 0", "(71+37) \\cdot 1", "\\frac{216}{2}"])
def test_restating_the_question_is_not_an_answer(boxed):
    prompt = [{"role": "user", "content": "Compute 71 + 37. Then halve 216 / 2 if you like."}]
    reply = think(f"\\boxed{{{boxed}}}")
    assert verify_math(reply, "108").reason == "unevaluated"   # the prompt is not needed to see it
    assert verify_math(reply, "108", "Compute 71 + 37. Then halve 216 / 2 if you like.").reason == "unevaluated"
    assert correctness([reply], ["108"], kind=["math"], prompts=[prompt]) == [0.0]
    assert verify_row(reply, {"kind": "math", "answer": "108", "prompt": prompt})[0] == 0.0


def test_an_expression_with_numbers_of_its_own_is_still_unevaluated():
    # 71 + 37 + 2 - 2 beat a rule that looked for the prompt's numbers: a plain-number gold takes a
    # numeral, whatever numbers an expression uses
    prompt = "How many subsets does a set with 10 elements have?"
    assert verify_math(think("\\boxed{2^{10}}"), "1024", prompt).reason == "unevaluated"
    assert verify_math(think("\\boxed{71 + 37 + 2 - 2}"), "108", "Compute 71 + 37.").reason == "unevaluated"
    assert verify_math(think("\\boxed{2^{10}}"), "2^{10}", prompt).reason == "match"   # the gold's own form
    assert verify_math(think("\\boxed{1024}"), "1024", prompt).reason == "match"
    assert verify_math(think("\\boxed{\\frac{1}{2}}"), "0.5", "Halve 1.").reason == "match"   # a numeral


# ---------------------------------------------------------------- degenerate replies

def test_a_reply_without_an_answer_earns_nothing_from_any_reward():
    gold, prompt = "108", "Compute 71 + 37."
    replies = [think(""), think("\\boxed{}"), think("\\boxed{"), "<think>\n\u200b\n</think>\n\n\\boxed{7}"]
    assert format_reward(replies, thinking=[True] * 4) == [0.0] * 4
    assert language_consistency(replies[:3], ["en"] * 3) == [0.0] * 3
    assert mode([think("", reasoning="")], thinking=[False]) == [0.0]   # an empty /no_think reply
    honest = think("\\boxed{107}", reasoning="71 plus 37 is 107, I carried wrong somewhere along the way")
    length = make_length_reward(num_generations=3)
    got = length([honest, replies[0], replies[1]], [gold] * 3, prompts=[prompt] * 3)
    assert got[1] == got[2] == NO_ANSWER and got[0] <= 0   # never better than an honest wrong attempt


def test_direct_answers_keep_the_case_the_reference_asks_for():
    assert direct_match(think("stone", ""), "STONE") == 0.0
    assert direct_match(think("STONE", ""), "STONE") == 1.0
    assert direct_match(think("paris", ""), "Paris") == 1.0   # capitalisation alone is not asked for
    assert direct_match(think("new york", ""), "New York") == 1.0
    assert direct_match(think("x", ""), None) == 0.0        # a row without a reference: no verdict, no raise


# ---------------------------------------------------------------- instruction constraints

@pytest.mark.parametrize("reply,constraints", [
    ("done done", [{"type": "ends_with", "value": "done"}]),
    ("Answer: Answer:", [{"type": "starts_with", "value": "Answer:"}]),
    ('{"a": NaN}', [{"type": "json"}]),
    ("the " * 49 + "end", [{"type": "min_words", "value": 50}]),
    ("a b " * 25 + "ok", [{"type": "min_words", "value": 50}]),
    ("TheAnswerToThisQuestionIsDefinitelyOneHundredAndEight", [{"type": "max_words", "value": 3}]),
    ("ответ четверг ok", [{"type": "language", "language": "en"}]),
    ("정답은 목요일입니다 好", [{"type": "language", "language": "zh"}]),
    ("first､ second﹑ third︐ fourth‚ fifth", [{"type": "no_comma"}]),
    ("The ᴀɴsᴡᴇʀ is 5", [{"type": "forbidden_words", "words": ["answer"]}]),
    ("The **ans**wer is 5", [{"type": "forbidden_words", "words": ["answer"]}]),
    ("答·案是5", [{"type": "forbidden_words", "words": ["答案"]}]),
])
def test_constraint_evasions_score_zero(reply, constraints):
    assert instruction_score(think(reply, ""), constraints) == 0.0


def test_glued_words_count_as_words():
    assert count_words("TheAnswerIsFive") == 4
    assert count_words("これはこたえです") == 8
    assert count_words("The answer is five") == 4


def test_a_fenced_reply_with_a_long_blank_run_is_read_in_linear_time():
    reply = think("```json\n" + "\n" * 200_000 + '{"answer": "Tuesday"}\n```', "")
    assert instruction_score(reply, [{"type": "json", "keys": {"answer": "str"}}]) == 1.0


def test_a_message_without_content_is_no_reply_not_an_error():
    assert correctness([[{"role": "assistant", "content": None}]], ["5"], kind=["math"]) == [0.0]
