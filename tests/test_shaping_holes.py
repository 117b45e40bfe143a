"""Shaping holes a reward-seeking policy found (bench/reward_attacks.py), closed: a hedge after the
box, reasoning in look-alike think markers after an empty block, think blocks without content, and
replies ending in pad counted as finished. Honest replies stay paid."""
from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from posttrain.chat import assemble_response, parse_response, visible
from posttrain.evaluation.suites import reasoning_consistency
from posttrain.rewards import format_reward, language_consistency, mode, truncated_flags
from posttrain.rewards.format import format_ok, mode_ok, substantive
from posttrain.rewards.length import make_length_reward
from posttrain.rewards.math import verify_math
from posttrain.world import tasks

E = "<think>\n\n</think>\n\n"


# ---------------------------------------------------------------- trailing words: the value goes on after its box

@pytest.mark.parametrize("answer", ["答案是\\boxed{130} 以上。", "答案是\\boxed{130}以上。", "The answer is \\boxed{130} or more.",
                                    "The answer is \\boxed{130}+.", "The answer is \\boxed{130} approximately.",
                                    "$\\boxed{130}$ at least", "\\boxed{130} \\text{ or so}.", "\\boxed{130} thousand.",
                                    "\\boxed{130} (roughly).", "\\boxed{130} maybe\nIt is 130."])
def test_words_after_the_box_that_qualify_its_value_refuse_the_answer(answer):
    verdict = verify_math(assemble_response("130 is 100+30, and 100+30=130 so the total is 130", answer), "130")
    assert (verdict.reward, verdict.reason) == (0.0, "qualified")


@pytest.mark.parametrize("answer", ["\\boxed{5}.", "$\\boxed{5}$.", "\\boxed{5}. This is the final answer.", "\\boxed{5}",
                                    "The answer is \\boxed{5}.", "答案是\\boxed{5}。", "答案是\\boxed{5}个。", "\\(\\boxed{5}\\).",
                                    "**\\boxed{5}**", "\\[\\boxed{5}\\]", "\\boxed{5} is the final answer.",
                                    "\\boxed 5. Done here."])
def test_closing_punctuation_and_a_new_sentence_after_the_box_still_pay(answer):
    assert verify_math(assemble_response("2+3=5, write 5, so the sum is 5", answer), "5").reward == 1.0


@pytest.mark.parametrize("answer", ["\\boxed{12} cm", "\\boxed{12} cm.", "\\boxed{12} square meters.", "\\boxed{12}\\text{ km}^2."])
def test_a_unit_the_in_box_allowlist_accepts_may_follow_the_box(answer):
    assert verify_math(assemble_response("3×4=12, so the side gives 12", answer), "12").reward == 1.0


# ---------------------------------------------------------------- mode: reasoning in look-alike markers

LOOKALIKES = ["<thinking>{r}</thinking>", "＜think＞{r}＜/think＞", "< think >{r}< /think >", "<\u200bthink>{r}</\u200bthink>",
              "&lt;think&gt;{r}&lt;/think&gt;", "<THINK>{r}</THINK>", "<think type='x'>{r}", "{r}</thinking>",
              "&#60;think&#62;{r}", "<th\u2060ink>{r}</th\u2060ink>", "＜ｔｈｉｎｋ＞{r}"]


@pytest.mark.parametrize("markers", LOOKALIKES)
def test_a_think_like_marker_in_the_answer_fails_mode_and_format(markers):
    reply = E + markers.format(r="63加57，逐位计算，结果是120。") + "\n答案是\\boxed{120}。"
    assert not mode_ok(reply, False) and not format_ok(reply, False) and not format_ok(reply, None)
    assert mode([reply], thinking=[False]) == [0.0] and format_reward([reply], kind=["math"], thinking=[False]) == [0.0]


def test_honest_replies_without_markers_keep_their_mode():
    honest = assemble_response("63+57: 3+7=10, write 0 carry 1; 6+5+1=12; so 120", "The answer is \\boxed{120}.")
    plain = E + "Thinking aside, the answer is \\boxed{120}."   # the word is not a marker
    assert mode_ok(honest, True) and format_ok(honest, True) and format_ok(plain, False) and mode_ok(plain, False)


# ---------------------------------------------------------------- degenerate think blocks

DEGENERATE = ["b e c", "1 2 3", "1 2 3 4 5 6", "hmm ok", "ok sure", "well ok", "let me", "let me think", "好的 嗯", "ok 好",
              "apple banana", "Compute 26 - 72.", "计算 26 - 72。", "x y z", "hmm hmm hmmm", "so so so", "…", "🤔🤔",
              "\u200b\u200b", "a\u0301\u0302\u0303", "ok ok ok ok"]


@pytest.mark.parametrize("reasoning", DEGENERATE)
def test_reasoning_without_content_earns_no_shaping_reward_in_training_or_evaluation(reasoning):
    reply = assemble_response(reasoning, "The answer is \\boxed{-46}.")
    assert not substantive(reasoning)
    assert format_reward([reply], kind=["math"], thinking=[True]) == [0.0] and mode([reply], thinking=[True]) == [0.0]
    if visible(reasoning):   # an invisible block is an empty one, which a prompt without a mode allows
        assert format_reward([reply], kind=["math"], thinking=[None]) == [0.0]
    assert language_consistency([reply], ["en"])[0] in (0.0, None)
    assert reasoning_consistency(reply, "en") == 0.0 and reasoning_consistency(reply, "zh") == 0.0


def test_the_question_copied_as_reasoning_is_no_reasoning_where_the_prompt_is_known():
    question = "Tom has 37 apples and buys 48 more. How many apples does Tom have now?"
    assert substantive(question) and not substantive(question, question)
    assert substantive("37+48: 7+8=15, write 5 carry 1; 3+4+1=8, write 8; so 85", question)
    assert substantive("71 plus 37 is 108", "Compute 71 + 37.")
    copied, honest = (assemble_response(r, "The answer is \\boxed{85}.") for r in (question, "37 plus 48 makes 85"))
    length = make_length_reward(2)
    got = length([copied, honest], answer=["85"] * 2, kind=["math"] * 2, thinking=[True] * 2, prompts=[question] * 2)
    assert got[0] <= 0 < got[1]


def test_every_world_math_gold_reply_keeps_format_language_and_verify():
    problems = tasks.math_problems(300, 0, "train") + tasks.math_problems(200, 1, "eval")
    for p in problems:
        reply = assemble_response(p.reasoning, tasks.default_math_answer(p.answer, p.language))
        assert substantive(p.reasoning, p.question), p
        assert format_ok(reply, True, p.question) and format_ok(reply, None) and mode_ok(reply, True), p
        assert language_consistency([reply], [p.language])[0] > 0.9 and reasoning_consistency(reply, p.language) > 0.9, p
        assert verify_math(reply, p.answer).reward == 1.0, p


def test_evaluation_and_training_share_one_language_consistency():
    rng = random.Random(0)
    replies = [assemble_response(r, "\\boxed{5}") for r in
               ["2 plus 3 gives 5", "二加三得五，所以答案是五", "2加3, so 5 we write", "…", "b e c", "hmm ok", "1+2=3"]]
    replies += [assemble_response(p.reasoning, f"\\boxed{{{p.answer}}}") for p in tasks.math_problems(20, rng.randint(0, 9), "train")]
    for reply in replies:
        content = substantive(parse_response(reply).reasoning)
        for language in ("en", "zh"):
            trained, scored = language_consistency([reply], [language])[0], reasoning_consistency(reply, language)
            if not content:   # "…" scored 1.0 in evaluation, while training paid nothing
                assert scored == 0.0 and trained in (0.0, None), reply
            else:   # the training reward's value; digits only (`1+2=3`, no words) is in no language: 1
                assert scored == (1.0 if trained is None else trained), reply


# ---------------------------------------------------------------- truncation: pad is no stop token

def test_truncation_stops_exactly_where_generation_stops_not_on_pad():
    from posttrain.generation.engines import _stop_ids
    from posttrain.training.trainers import stop_token_ids

    tokenizer = SimpleNamespace(eos_token_id=2, pad_token_id=0, chat_template=None)
    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=[2, 7]))
    stops = stop_token_ids(model, tokenizer)
    assert stops == frozenset(_stop_ids(model, tokenizer)) == {2, 7}
    assert truncated_flags([[5, 6, 0], [5, 6, 2], [5, 7]], stops, 3) == [True, False, False]
    same = SimpleNamespace(eos_token_id=2, pad_token_id=2, chat_template=None)   # pad is eos: it ends a reply
    assert 2 in stop_token_ids(model, same)


def test_a_reply_ending_in_pad_is_truncated_for_the_task_reward_as_in_evaluation(tokenizer):
    from posttrain.generation.engines import _stop_ids
    from posttrain.rewards import RewardSettings, make_task_reward
    from posttrain.training.trainers import stop_token_ids

    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=tokenizer.eos_token_id))
    if tokenizer.pad_token_id in _stop_ids(model, tokenizer):
        pytest.skip("this tokenizer's pad is a stop token")
    reward = make_task_reward("correctness", RewardSettings(stop_ids=stop_token_ids(model, tokenizer)))
    reply = assemble_response("20+22: 0+2=2; 2+2=4; so 42", "\\boxed{42}")
    ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
    got = reward([reply, reply], answer=["42"] * 2, kind=["math"] * 2,
                 completion_ids=[ids + [tokenizer.pad_token_id], ids + [tokenizer.eos_token_id]])
    assert got == [0.0, 1.0]


def test_the_new_checks_stay_linear_on_replies_built_to_backtrack():
    import time

    start = time.perf_counter()
    for text in ("1+" * 100_000, "1 + " * 50_000, "1 plus " * 30_000, "1=1" * 60_000, " x" * 100_000):
        substantive(text, text)
        mode_ok(E + "< " * 50_000 + "<think" * 20_000 + "&lt;" * 20_000 + "\\boxed{1}", False)
        verify_math("\\boxed{1}" + " x" * 100_000, "1")
        verify_math("\\boxed{1}" + "$" * 100_000 + "y", "1")
    assert time.perf_counter() - start < 10
