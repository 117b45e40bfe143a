"""The instruction verifier against replies that should earn nothing: degenerate replies, constraints
met vacuously, forbidden words in disguise, invalid or malformed constraints, and the IFEval /
Tulu-3 constraint form."""
import json

import pytest

from posttrain.chat import assemble_response
from posttrain.rewards import instruction
from posttrain.rewards.instruction_guard import degenerate_reason
from posttrain.rewards.instruction import INSTRUCTION_VERSION, check_constraint, constraints_from_ifeval, instruction_score, parse_constraints, validate_constraints
from posttrain.rewards.instruction_text import count_words, fold_text
from posttrain.world import tasks

NO_THINK_FORBIDDEN = [{"type": "no_thinking"}, {"type": "forbidden_words", "words": ["answer"]}]


def reply(text: str) -> str:
    return assemble_response("", text)


# ---------------------------------------------------------------- degenerate replies earn nothing

@pytest.mark.parametrize("junk", [
    "", "<|im_end|>", "<|endoftext|><|im_end|>", "   \n ", "...", "?!  -- ;", "A", "x", "12345", "7 3 9",
    "the the the", "ok ok", "good day good day good day", "哈哈哈", "\\boxed{}", "<think></think>",
])
def test_degenerate_replies_score_zero(junk):
    assert instruction_score(reply(junk), NO_THINK_FORBIDDEN) == 0.0
    assert instruction_score(junk, NO_THINK_FORBIDDEN) == 0.0  # raw, without the think block
    assert instruction_score(reply(junk), NO_THINK_FORBIDDEN, partial=True) == 0.0


def test_one_letter_meets_no_case_or_length_rule_for_a_reward():
    both = [{"type": "uppercase"}, {"type": "max_words", "value": 3}, *NO_THINK_FORBIDDEN]
    assert instruction_score(reply("A"), both) == 0.0
    assert instruction_score(reply("FINE WEATHER TODAY"), both) == 1.0   # "FINE THANKS" fits any prompt: generic


@pytest.mark.parametrize("text,reference,reason", [
    ("", None, "no words"),
    ("<|im_end|> ... !!", None, "no words"),
    ("A", None, "no content word"),
    ("12345", None, "no content word"),            # digits alone are not a reply to a word task
    ("12345", "Tuesday", "no content word"),
    ("the The THE", None, "repeated"),
    ("go home go home go", None, "repeated"),       # a loop, cut off mid-phrase
    ("5 5", "5", "repeated"),
    ("forty-two", "42", "asks for a number"),
    ('{"answer": ""}', "Tuesday", "no words"),     # JSON keys are format: the values are the reply
])
def test_degenerate_reason_names_why(text, reference, reason):
    assert reason in degenerate_reason(text, reference)


def test_real_replies_are_not_degenerate_and_their_junk_twins_are():
    real = [("5", "5"), ("\\boxed{42}", "42"), ('{"answer": 42}', "42"), ("Tuesday", None), ("冷", "热"),
            ("星期三", "Wednesday"), ("fifty-seven", "五十七"), ("go home now", None), ("二十二", None),
            (" ".join("".join(chr(97 + i // 26 ** k % 26) for k in range(3)) for i in range(3000)), None)]  # long
    junk = [("5 5", "5"), ("\\boxed{}", "42"), ('{"answer": null}', "42"), ("Tuesday Tuesday", None),
            ("7", "热"), ("W", "Wednesday"), ("57", "五十七"), ("go home go home", None), ("二二", None),
            ("ab " * 3000, None), ("ab " * 3000 + "cd", None)]  # the last: padding, not one phrase repeated
    assert [degenerate_reason(text, ref) for text, ref in real] == [None] * len(real)
    assert all(degenerate_reason(text, ref) for text, ref in junk)


def test_the_words_a_constraint_dictates_are_not_content():
    ends = [{"type": "ends_with", "value": "done"}]
    starts = [{"type": "starts_with", "value": "Answer:"}]
    assert instruction_score(reply("done"), ends) == 0.0
    assert instruction_score(reply("Answer:"), starts) == 0.0
    assert instruction_score(reply("It is Tuesday done"), ends) == 1.0
    assert instruction_score(reply("Answer: Tuesday"), starts) == 1.0


def test_world_eval_tasks_pay_no_junk_and_every_gold_reply():
    """bench/instruction_degenerate.py measures the same, and the old verifier, on the full suite.
    A number on a task whose answer is a number, or one Chinese word on a task answered in one, is a
    well-formed (maybe wrong) answer that constraints cannot tell from junk: correctness is another
    reward's job; everywhere else they earn nothing."""
    suite = tasks.instruction_tasks(90, 3, "eval")
    for t in suite:
        numeric = t.answer.isdigit()
        for shape in (str, reply):
            for junk in ("", "<|im_end|>", "A", "the the the the", "... ?!", "7 7 7"):
                assert instruction_score(shape(junk), t.constraints, reference=t.answer) == 0.0, (junk, t)
            if not numeric:
                assert instruction_score(shape("83920174"), t.constraints, reference=t.answer) == 0.0, t
            if numeric or t.constraints[0]["type"] in ("uppercase", "lowercase"):
                assert instruction_score(shape("的"), t.constraints, reference=t.answer) == 0.0, t
        assert instruction_score(t.gold_response, t.constraints, reference=t.answer) == 1.0
    for t in suite + tasks.instruction_tasks(200, 0, "train"):  # the world's data passes validation
        assert parse_constraints(t.to_row()["constraints"]) == t.constraints


# ---------------------------------------------------------------- no constraint holds vacuously

@pytest.mark.parametrize("ctype", ["uppercase", "lowercase"])
@pytest.mark.parametrize("text", ["的", "星期二", "答案是 3"])
def test_case_rules_need_a_cased_letter(ctype, text):
    assert not check_constraint(reply(text), {"type": ctype})
    assert not check_constraint(reply("\\boxed{3}"), {"type": "lowercase"})  # markup is not the reply


def test_an_empty_ends_with_matches_nothing():
    assert not check_constraint(reply("It is 3"), {"type": "ends_with", "value": ""})
    assert not check_constraint(reply("It is 3"), {"type": "starts_with", "value": "  "})
    assert instruction_score(reply("It is Tuesday"), [{"type": "ends_with", "value": ""}]) == 0.0


def test_ends_and_starts_with_match_whole_words():
    assert not check_constraint(reply("It was abandoned"), {"type": "ends_with", "value": "done"})
    assert check_constraint(reply("It is 3, done."), {"type": "ends_with", "value": "done"})
    assert check_constraint(reply("Any other questions."), {"type": "ends_with", "value": "Any other questions."})
    assert not check_constraint(reply("Answering now"), {"type": "starts_with", "value": "Answer"})


def test_words_are_letters_ideographs_and_numbers_not_punctuation():
    assert count_words("答案是 3") == 4
    assert count_words(". . . -- ok") == 1
    assert not check_constraint(reply(". . . ok"), {"type": "min_words", "value": 3})


# ---------------------------------------------------------------- forbidden words in disguise

@pytest.mark.parametrize("disguised", [
    "The ＡＮＳＷＥＲ is 3",              # fullwidth
    "The аnswer is 3",                    # Cyrillic а
    "The ΑΝSWΕR is 3",                    # Greek capitals
    "The ans\u200bwer is 3",              # zero-width space
    "The an\u00adswer is 3",              # soft hyphen
    "The ánswer is 3",                    # combining accent
    "The 𝐚𝐧𝐬𝐰𝐞𝐫 is 3",                    # mathematical bold
    "答案是answer，3",                       # glued to Chinese text
])
def test_forbidden_words_match_through_disguises(disguised):
    c = {"type": "forbidden_words", "words": ["answer"]}
    assert not check_constraint(reply(disguised), c)
    assert check_constraint(reply("The result is 3"), c)


@pytest.mark.parametrize("word,text", [
    ("这个", "這個是3"),          # traditional for simplified
    ("這個", "这个是3"),          # and the other way round
    ("答案", "答\u200b案是3"),
    ("答案", "答 案是3"),
])
def test_forbidden_chinese_words_match_across_scripts_and_gaps(word, text):
    assert not check_constraint(reply(text), {"type": "forbidden_words", "words": [word]})


def test_folding_does_not_merge_distinct_ascii_words():
    c = {"type": "forbidden_words", "words": ["modern"]}
    assert check_constraint(reply("a cable modem"), c)
    assert check_constraint(reply("The answers are 3"), {"type": "forbidden_words", "words": ["answer"]})
    assert fold_text("Ｆｕｌｌ Аnswer 這個") == "full answer 这个"


# ---------------------------------------------------------------- validation and parsing

@pytest.mark.parametrize("bad,named", [
    ({"type": "ends_with", "value": ""}, "ends_with"),
    ({"type": "starts_with", "value": "   "}, "starts_with"),
    ({"type": "min_words", "value": 0}, "min_words"),
    ({"type": "max_words", "value": -1}, "max_words"),
    ({"type": "max_words", "value": "2"}, "max_words"),
    ({"type": "max_words", "value": True}, "max_words"),
    ({"type": "forbidden_words", "words": []}, "forbidden_words"),
    ({"type": "forbidden_words", "words": ["", "x"]}, "forbidden_words"),
    ({"type": "forbidden_words", "words": ["\u200b"]}, "forbidden_words"),
    ({"type": "forbidden_words", "words": "answer"}, "forbidden_words"),
    ({"type": "language", "language": "xx"}, "language"),
    ({"type": "language", "language": "zh", "min_share": 0}, "language"),
    ({"type": "json", "keys": {"answer": "integer"}}, "json"),
    ({"type": "uppercase", "value": 3}, "uppercase"),
    ({"type": "nope"}, "constraint 1: unknown type 'nope'"),
    ({"value": 3}, "unknown type"),
    ("uppercase", "constraint 0"),
])
def test_validation_refuses_vacuous_unknown_and_malformed_constraints(bad, named):
    with pytest.raises(ValueError, match=named):
        validate_constraints([{"type": "no_thinking"}, bad] if isinstance(bad, dict) else [bad])
    assert instruction_score(reply("It is Tuesday"), [bad]) == 0.0


def test_validation_refuses_empty_and_contradictory_sets():
    for bad in ([], None, {"type": "uppercase"}, [{"type": "uppercase"}, {"type": "lowercase"}],
                [{"type": "min_words", "value": 5}, {"type": "max_words", "value": 2}]):
        with pytest.raises(ValueError):
            validate_constraints(bad)


def test_parse_constraints_gives_a_clear_error_for_a_malformed_string():
    with pytest.raises(ValueError, match="not valid JSON") as err:
        parse_constraints('[{"type": "uppercase"')
    assert not isinstance(err.value, json.JSONDecodeError)
    with pytest.raises(ValueError, match="nest too deeply"):
        parse_constraints("[" * 100_000)
    assert parse_constraints('[{"type": "uppercase"}]') == [{"type": "uppercase"}]
    assert parse_constraints({"type": "uppercase"}) == [{"type": "uppercase"}]


def test_a_malformed_constraint_string_is_zero_reward_not_a_crash():
    completions = [[{"role": "assistant", "content": reply("CATS PURR")}]] * 3
    cols = dict(kind=["instruction"] * 3, answer=[""] * 3,   # no reference: "DONE" for answer "x" was a wrong answer
                constraints=['[{"type": "uppercase"', '[{"type": "uppercase"}]', "[" * 100_000])
    assert instruction(completions=completions, **cols) == [0.0, 1.0, 0.0]
    assert instruction_score(reply("DONE NOW"), '{"type": ') == 0.0


def test_version_marks_the_new_semantics():
    assert INSTRUCTION_VERSION == "instruction/8"


# ---------------------------------------------------------------- the IFEval / Tulu-3 form

def test_ifeval_ids_map_to_our_constraints():
    ids = ["punctuation:no_comma", "length_constraints:number_words", "keywords:forbidden_words",
           "change_case:english_lowercase", "detectable_format:json_format", "startend:end_checker",
           "language:response_language", "length_constraints:number_words"]
    kwargs = [{}, {"relation": "less than", "num_words": 50, "keywords": None},
              {"forbidden_words": ["sun", "moon"]}, {}, {}, {"end_phrase": "Is there anything else?"},
              {"language": "en"}, {"relation": "at least", "num_words": 3}]
    assert constraints_from_ifeval(ids, kwargs) == [
        {"type": "no_comma"}, {"type": "max_words", "value": 49},
        {"type": "forbidden_words", "words": ["sun", "moon"]},
        {"type": "lowercase"}, {"type": "language", "language": "en", "detect": True}, {"type": "json"},
        {"type": "ends_with", "value": "Is there anything else?"}, {"type": "language", "language": "en", "detect": True},
        {"type": "min_words", "value": 3}]


def test_ifeval_rows_are_scored_through_parse_constraints():
    row = json.dumps({"instruction_id_list": ["punctuation:no_comma", "change_case:english_capital"],
                      "kwargs": [{}, {}]})
    assert instruction_score(reply("THE SKY IS BLUE"), row) == 1.0
    assert instruction_score(reply("THE SKY, IS BLUE"), row) == 0.0
    assert instruction_score(reply("The sky is blue"), row) == 0.0
    assert instruction_score(reply("的的"), row) == 0.0


@pytest.mark.parametrize("ids,kwargs,named", [
    (["detectable_format:rephrase"], [{}], "detectable_format:rephrase"),   # not among IFEval's 25
    (["keywords:existence"], [{"keywords": []}], "keywords:existence"),
    (["language:response_language"], [{"language": "xx"}], "language:response_language"),
    (["length_constraints:number_words"], [{"relation": "around", "num_words": 5}], "number_words"),
    (["length_constraints:number_words"], [{"relation": "less than", "num_words": 1}], "max_words"),
    (["keywords:forbidden_words"], [{"forbidden_words": []}], "forbidden_words"),
    (["punctuation:no_comma"], [{}, {}], "parallel"),
    ([], [], "non-empty"),
])
def test_ifeval_ids_we_cannot_check_are_named(ids, kwargs, named):
    with pytest.raises(ValueError, match=named):
        constraints_from_ifeval(ids, kwargs)
