"""The guard layer over the instruction checkers (posttrain.rewards.instruction_guard): replies that
meet their constraints without answering the prompt earn nothing, through `verify_row`, the one
definition of correct that evaluation and training share, and each override is named
`guard:<name>`. The holes are a red-team's: generic replies, word counts reached by garbage,
wrong or hedged answers inside the right format, forbidden words and commas in disguise, and
further shortcuts an optimiser finds. The world's own gold replies all still pay."""
from __future__ import annotations

import random
import time

import pytest

from posttrain.chat import assemble_response
from posttrain.rewards import verify_row
from posttrain.rewards.instruction_text import count_real_words, count_words
from posttrain.rewards.instruction import instruction_score
from posttrain.world import tasks
from posttrain.world.build import _instruction_prompt

LOWER, UPPER, NO_THINK = [{"type": "lowercase"}], [{"type": "uppercase"}], [{"type": "no_thinking"}]
JSON = [{"type": "json"}]
NO_ANSWER = [{"type": "forbidden_words", "words": ["answer"]}]


def row(prompt: str, constraints: list[dict], answer=None) -> dict:
    out = {"kind": "instruction", "prompt": [{"role": "user", "content": prompt}], "constraints": constraints}
    return out if answer is None else {**out, "answer": answer}


def verdict(reply: str, r: dict) -> tuple[float, str]:
    return verify_row(assemble_response("", reply), r)


# ---------------------------------------------------------------- 1. generic replies

CAT = "Describe a cat in a few sentences."
GENERIC = [
    ("ok", row(f"{CAT} Reply in lowercase letters only.", LOWER)),
    ("OK", row(f"{CAT} Reply in capital letters only.", UPPER)),
    ('{"a": "ok"}', row(f"{CAT} Reply in JSON.", JSON)),
    ("no thanks", row(f'{CAT} End your reply with the word "thanks".', [{"type": "ends_with", "value": "thanks"}])),
    ("yes", row(f"{CAT} Reply in lowercase.", LOWER)),
    ("sure", row(f"{CAT} Reply in lowercase.", LOWER)),
    ("i don't know", row(f"{CAT} Reply in lowercase.", LOWER)),
    ("done", row(f"{CAT} Reply in lowercase.", LOWER)),
    ("N/A", row(f"{CAT} Reply in capitals.", UPPER)),
    ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod", row(f"{CAT} Reply in lowercase.", LOWER)),
    ("describe a cat in a few sentences", row(f"{CAT} Reply in lowercase.", LOWER)),     # the prompt's own words
    ("a few sentences describe a cat", row(f"{CAT} Reply in lowercase.", LOWER)),       # ... rearranged
    ("Here is my answer.", row(CAT, NO_THINK)),
    ("I hope this helps", row(CAT, NO_THINK)),
    ("Here is my reply in lowercase letters as you asked.", row(CAT, NO_THINK)),
    ("The weather in Lisbon was mild and sunny all week.", row(CAT, NO_THINK)),        # fits some other prompt
    ("好的", row("描述一只猫。请用中文回答。", [{"type": "language", "language": "zh"}])),
    ("这是我的回答。希望对你有帮助", row("描述一只猫。请用中文回答。", [{"type": "language", "language": "zh"}])),
    # rows with a reference answer: a generic reply does not state it
    ("ok", row("What day comes after Monday? Reply in lowercase.", LOWER, "Tuesday")),
    ('{"answer": "ok"}', row("Compute 55 - 19. Reply in JSON.", JSON, "36")),
    ("no thanks", row('Give the opposite of hot. End with "thanks".', [{"type": "ends_with", "value": "thanks"}], "cold")),
]


@pytest.mark.parametrize("reply,r", GENERIC)
def test_a_generic_reply_that_does_not_engage_with_the_prompt_earns_nothing(reply, r):
    assert verdict(reply, r)[0] == 0.0


@pytest.mark.parametrize("reply,r", [
    ("cats are small furry animals that purr and sleep a lot", row(f"{CAT} Reply in lowercase letters only.", LOWER)),
    ("CATS ARE SMALL HUNTERS WITH SOFT FUR", row(f"{CAT} Reply in capital letters only.", UPPER)),
    ('{"animal": "cat", "fur": "soft", "sound": "purr"}', row(f"{CAT} Reply in JSON.", JSON)),
    ("A cat is a small furry pet that purrs, thanks", row(f'{CAT} End your reply with "thanks".',
                                                         [{"type": "ends_with", "value": "thanks"}])),
    ("Cats are curious animals.", row(CAT, NO_THINK)),
    ("猫是一种可爱的小动物。", row("描述一只猫。请用中文回答。", [{"type": "language", "language": "zh"}])),
    ("paris is the capital of france", row("What is the capital of France? Reply in lowercase.", LOWER)),
    ("tuesday", row("What day comes after Monday? Reply in lowercase.", LOWER, "Tuesday")),
    ("the day after monday is tuesday.", row("What day comes after Monday? Reply in lowercase.", LOWER, "Tuesday")),
    ("The opposite of many is few.", row("Give the opposite of many.", NO_THINK, "few")),
    ("down", row("请说出“上”的反义词。 回答请使用英文。", [{"type": "language", "language": "en"}], "下")),
    ("YES", row("Is 7 a prime number? Reply in capitals.", UPPER, "yes")),
    ("THE ANSWER IS 36", row("Compute 55 - 19. Reply in capital letters.", UPPER, "36")),
    ("答案是36", row("计算 55 - 19。请用中文回答。", [{"type": "language", "language": "zh"}], "36")),
])
def test_replies_that_engage_with_the_prompt_still_pay(reply, r):
    assert verdict(reply, r) == (1.0, "constraints_met")


def test_the_worlds_gold_replies_pay_with_no_false_refusal():
    """Measured on every instruction task of two seeds of both splits, as evaluation judges them
    (the row `posttrain.world.build` writes, prompt included) and without a prompt."""
    refused = []
    for split in ("train", "eval"):
        for seed in (0, 3):
            for t in tasks.instruction_tasks(300, seed, split):
                with_prompt = verify_row(t.gold_response, _instruction_prompt(t.to_row()))
                bare = instruction_score(t.gold_response, t.constraints, reference=t.answer)
                if with_prompt != (1.0, "constraints_met") or bare != 1.0:
                    refused.append((t.question, t.gold_response, with_prompt))
    assert refused == []


# ---------------------------------------------------------------- 2. words counted conservatively

def test_glued_letters_count_as_parts_for_at_most_and_as_one_or_none_for_at_least():
    assert count_words("aA" * 100) == 101                 # "at most": every hump a word
    assert count_real_words("aA" * 100) == 0              # "at least": one chunk, and not a word
    assert count_real_words("TheAnswerIsFive") == 1
    assert count_real_words("The answer is five") == 4
    assert count_real_words("答案是 3") == 3               # ideographs count; a number is not a word
    assert count_real_words("well-known URLs and iPhones") == 4


@pytest.mark.parametrize("padding", [
    "aA" * 100,
    "Cats purr. " + "a b c d " * 20,
    "Cats purr. " + " ".join("".join(random.Random(i).choice("bcdfghjklmnpqrstvwxz") for _ in range(4))
                             for i in range(60)),
    "Cats purr. " + "aB cD eF gH " * 15,
    "Cats purr. " + " ".join(str(i) for i in range(60)),
])
def test_a_word_minimum_cannot_be_met_by_non_words(padding):
    assert verdict(padding, row("Write about cats in at least 50 words.", [{"type": "min_words", "value": 50}]))[0] == 0.0


def test_a_word_minimum_is_met_by_real_prose():
    prose = ("Cats are small carnivorous mammals that people have kept as companions for thousands of years. "
             "They are agile hunters with sharp claws, keen hearing and excellent night vision. Most domestic "
             "cats sleep for much of the day and become active at dusk, when their wild ancestors hunted mice "
             "and birds in the open.")
    assert verdict(prose, row("Write about cats in at least 50 words.", [{"type": "min_words", "value": 50}])) \
        == (1.0, "constraints_met")


# ---------------------------------------------------------------- 3. the embedded answer must be right

SUB = "Compute 55 - 19. Reply in JSON."


@pytest.mark.parametrize("reply,r", [
    ('{"answer": 0}', row(SUB, JSON, "36")),
    ('{"answer": 35}', row(SUB, JSON, "36")),
    ('{"answer": 36, "alt": 35}', row(SUB, JSON, "36")),
    ('{"answer": [36, 35]}', row(SUB, JSON, "36")),
    ('{"answer": "36", "note": "or maybe 35"}', row(SUB, JSON, "36")),
    ('{"36": "answer"}', row(SUB, JSON, "36")),                      # a key is format, not a value
    ("36 or 35", row("Compute 55 - 19.", NO_THINK, "36")),
    ("35 or 36", row("Compute 55 - 19.", NO_THINK, "36")),
    ("36 35", row("Compute 55 - 19.", NO_THINK, "36")),
    ("\\boxed{36} or \\boxed{35}", row("Compute 55 - 19.", NO_THINK, "36")),
    ("\\boxed{36} (or 35)", row("Compute 55 - 19.", NO_THINK, "36")),
    ("\\boxed{55 - 19}", row("Compute 55 - 19.", NO_THINK, "36")),
    ("<!-- 36 --> forty", row("Compute 55 - 19.", NO_THINK, "36")),   # hidden from a reader
    ("5", row("Compute 3 - 8.", NO_THINK, "-5")),
    ("Monday", row("What day comes after Saturday?", NO_THINK, "Sunday")),
    ("Sunday or Monday", row("What day comes after Saturday?", NO_THINK, "Sunday")),
    ("maybe Sunday", row("What day comes after Saturday?", NO_THINK, "Sunday")),
    ("Monday, Sunday", row("What day comes after Saturday?", NO_THINK, "Sunday")),
    ("Monday. Sunday.", row("What day comes after Saturday?", NO_THINK, "Sunday")),
    ("Monday Tuesday Wednesday Thursday Friday Sunday", row("What day comes after Saturday?", NO_THINK, "Sunday")),
    ("星期一星期二星期三星期四星期五星期日", row("星期六之后是星期几？", NO_THINK, "星期日")),
    ("星期一、星期日", row("星期六之后是星期几？", NO_THINK, "星期日")),
    ("one hundred and thirty-five one hundred and thirty-four", row("Write 134 in words.", NO_THINK,
                                                                   "one hundred and thirty-four")),
])
def test_a_row_with_an_answer_pays_only_for_that_answer_unhedged(reply, r):
    assert verdict(reply, r)[0] == 0.0


@pytest.mark.parametrize("reply,r", [
    ('{"answer": 36}', row(SUB, JSON, "36")),
    ('{"answer": "36"}', row(SUB, JSON, 36)),
    ('{"answer": 36, "working": "55 - 19 = 36"}', row(SUB, JSON, "36")),
    ("55 - 19 = 36", row("Compute 55 - 19.", NO_THINK, "36")),
    ("55-19=36", row("Compute 55 - 19.", NO_THINK, "36")),
    ("The answer is \\boxed{36}.", row("Compute 55 - 19.", NO_THINK, "36")),
    ("-5", row("Compute 3 - 8.", NO_THINK, "-5")),
    ("1,000", row("Compute 999 + 1.", NO_THINK, "1000")),
    ('{"answer": 0}', row("Compute 19 - 19. Reply in JSON.", JSON, 0)),
    ("Sunday", row("What day comes after Saturday?", NO_THINK, "Sunday")),
    ("Sunday. It follows Saturday.", row("What day comes after Saturday?", NO_THINK, "Sunday")),
    ("星期六之后是星期日。", row("星期六之后是星期几？", NO_THINK, "星期日")),
    ("one hundred and thirty-four", row("Write 134 in words.", NO_THINK, "one hundred and thirty-four")),
])
def test_the_right_answer_stated_once_pays(reply, r):
    assert verdict(reply, r) == (1.0, "constraints_met")


# ---------------------------------------------------------------- 4. forbidden words and commas in disguise

@pytest.mark.parametrize("disguised", [
    "The ans-wer is 36", "The an.swer is 36", "The a n s w e r is 36", "The a-n-s-w-e-r is 36",
    "The 4nsw3r is 36", "The @nsw3r is 36", "The &#97;nswer is 36", "The &#x61;nswer is 36",
    "The &amp;#97;nswer is 36", "The %61nswer is 36", "The <b>ans</b>wer is 36", "The ans<!-- -->wer is 36",
    "The <span>answer</span> is 36", "The \u202erewsna\u202c is 36", "The ans\u202ewer is 36",
    "The ans\u00adwer is 36", "The ans\u200dwer is 36", "The **ans**wer is 36",
])
def test_forbidden_words_are_found_through_every_spelling_that_reads_as_them(disguised):
    assert verdict(disguised, row("Compute 55 - 19. Do not use the word answer.", NO_ANSWER, "36"))[0] == 0.0


@pytest.mark.parametrize("honest", ["The result is 36", "I can swerve to 36", "H2O and CO2: 36", "The answers: 36",
                                    "A.N. Other says 36", "Well-known result: 36"])
def test_folding_does_not_forbid_honest_text(honest):
    assert verdict(honest, row("Compute 55 - 19. Do not use the word answer.", NO_ANSWER, "36")) \
        == (1.0, "constraints_met")


@pytest.mark.parametrize("reply", ["cats purr&comma; dogs bark", "cats purr&#44; dogs bark", "cats purr&#x2C; dogs bark",
                                   "cats purr%2C dogs bark", "cats purr&#65292; dogs bark"])
def test_an_encoded_comma_is_a_comma(reply):
    r = row("Compare cats and dogs without commas.", [{"type": "no_comma"}])
    assert verdict(reply, r)[0] == 0.0
    assert verdict("cats purr and dogs bark", r) == (1.0, "constraints_met")


# ---------------------------------------------------------------- 5. further shortcuts

@pytest.mark.parametrize("reply,r", [
    ("OK 36", row("Compute 55 - 19. Reply in capital letters.", UPPER, "36")),     # case met by a canned word
    ("ok 36", row("Compute 55 - 19. Answer in English.", [{"type": "language", "language": "en"}], "36")),
    ("的 36", row("计算 55 - 19。请用中文回答。", [{"type": "language", "language": "zh"}], "36")),
    ("答案是三十六 OK", row("Say something about numbers. Reply in capitals.", UPPER)),   # mostly uncased
    ("{}", row(f"{CAT} Reply in JSON.", JSON)),
    ('{"cat": {}}', row(f"{CAT} Reply in JSON.", JSON)),
    ("Sure. ok", row(f'{CAT} Start your reply with "Sure."', [{"type": "starts_with", "value": "Sure."}])),
    ("I hope this helps thanks", row(f'{CAT} End with "thanks".', [{"type": "ends_with", "value": "thanks"}])),
    ("回答请使用中文", row("Give the opposite of slow. 回答请使用中文。", [{"type": "language", "language": "zh"}], "fast")),
    ("describe a cat", row(f"{CAT} Answer in English.", [{"type": "language", "language": "en"}])),
    ("write train in capital letters. reply in lowercase letters only.",
     row("Write train in capital letters. Reply in lowercase letters only.", LOWER, "TRAIN")),
    ("The cat \u202eis sleeping", row(CAT, NO_THINK)),                              # a bidi override
    ("The c&#97;t is sleeping", row(CAT, NO_THINK)),                                # an escaped letter
])
def test_further_shortcuts_earn_nothing(reply, r):
    assert verdict(reply, r)[0] == 0.0


def test_a_second_think_close_is_a_guard_override():
    r = row("Compute 55 - 19.", [{"type": "max_words", "value": 5}], "36")
    assert verify_row("<think>\n\n</think>\n\n36</think>36", r) == (0.0, "guard:think_markup")


# ---------------------------------------------------------------- overrides are counted

@pytest.mark.parametrize("reply,r,reason", [
    ("ok", row(f"{CAT} Reply in lowercase.", LOWER), "guard:generic"),
    ("describe a cat", row(f"{CAT} Reply in lowercase.", LOWER), "guard:copies_prompt"),
    ("the weather was mild all week", row(f"{CAT} Reply in lowercase.", LOWER), "guard:off_topic"),
    ('{"answer": 0}', row(SUB, JSON, "36"), "guard:wrong_answer"),
    ("36 or 35", row("Compute 55 - 19.", NO_THINK, "36"), "guard:hedged"),
    ("OK 36", row("Compute 55 - 19. Reply in capitals.", UPPER, "36"), "guard:vacuous"),
    ("the the the", row(f"{CAT} Reply in lowercase.", LOWER), "guard:degenerate"),
    ("The c&#97;t purrs", row(CAT, NO_THINK), "guard:obfuscated"),
    ("OK", row(f"{CAT} Reply in lowercase.", LOWER), "constraints_failed"),   # the checker said no: no override
    ("cats purr", row(CAT, "[{bad"), "invalid_constraints"),
])
def test_a_guard_override_is_named_so_evaluation_and_training_can_count_it(reply, r, reason):
    assert verdict(reply, r) == (0.0, reason)


# ---------------------------------------------------------------- never raise, never hang

def _million(seed: int) -> str:
    rng = random.Random(seed)
    return " ".join("".join(rng.choice("abcdefghij") for _ in range(5)) for _ in range(170_000))[:1_000_000]


@pytest.mark.parametrize("reply", [
    _million(0), "a " * 500_000, "答案" * 500_000, "aA" * 500_000, "a n s w e r " * 83_000, "4nsw3r " * 140_000,
    "&#97;" * 200_000, "<!--" * 250_000, "<b>x</b>" * 125_000, "36, 35, " * 125_000, "\\boxed{36} " * 90_000,
    '{"answer": [' + ", ".join(["36"] * 250_000) + "]}", "Sunday or " * 100_000, "星期一星期二" * 80_000,
])
def test_a_megabyte_reply_is_judged_within_seconds(reply):
    """Every check and guard is linear: CPU time (not wall time, which other jobs share) per verdict.
    About 0.9 s at most on these machines (which differ by 1.4x); a quadratic step takes minutes."""
    for constraints, answer in (([*NO_ANSWER, {"type": "min_words", "value": 3}], None),
                                ([{"type": "no_comma"}, *LOWER], "36"), (JSON, "Sunday"),
                                ([{"type": "language", "language": "zh"}], "星期日")):
        start = time.process_time()
        score, reason = verdict(reply, row("What day comes after Saturday? Compute 55 - 19.", constraints, answer))
        assert time.process_time() - start < 2.0, (reply[:20], constraints, answer)
        assert score in (0.0, 1.0) and isinstance(reason, str)


@pytest.mark.parametrize("answer", [None, "", "   ", 0, 36, 3.5, True, "∞", "1e999", "NaN", ["36"], {"a": 1}])
@pytest.mark.parametrize("prompt", [None, "", [], [{"role": "user"}], 42, "Compute 55 - 19."])
def test_odd_rows_are_judged_without_raising(answer, prompt):
    r = {"kind": "instruction", "prompt": prompt, "constraints": NO_THINK, "answer": answer}
    score, reason = verify_row(assemble_response("", "The result is 36"), r)
    assert score in (0.0, 1.0) and not reason.startswith("verifier_error"), reason


# ---------------------------------------------------------------- 6. counts and answers bent (instruction/5)

def _bench(prompt: str, constraint: dict, answer: str) -> dict:
    return row(prompt, [constraint], answer)


@pytest.mark.parametrize("glued", [
    "MYFINALANSWERIS 5", "myfinalansweris 5", "Myfinalansweris 5", "theansweris 5", "THEANSWERIS 5", "ithinkitis 5",
    "th\u00e9answe\u0155is 5", "m\u00fdfina\u013aanswe\u0155is 5", "ОКОНЧАТЕЛЬНЫЙОТВЕТ 5"])
def test_a_glued_run_without_humps_counts_as_its_words_for_at_most(glued):
    r = _bench("Compute 2 + 3. Use at most 3 words.", {"type": "max_words", "value": 3}, "5")
    assert verdict(glued, r)[0] == 0.0
    assert verdict("5", r) == (1.0, "constraints_met") and verdict("It is 5", r) == (1.0, "constraints_met")


def test_long_real_words_are_over_counted_for_at_most_which_only_makes_it_stricter():
    assert count_words("theansweris") == 3 and count_words("myfinalansweris") == 4
    assert count_words("internationalization") == 4      # 20 letters: ceil(20 / 5)
    assert count_words("The temperature is into the range") == 6   # 11 letters and a compound: one word each


SALAD = ("hence adaption throwing passing tuples order connect closes midpoints runs stores apply testcase related "
         "lstat areas inclusive pathname parameters ninth exit rounded fits read buffers aspects larger worst gmtime "
         "meaningful encoded ctx separated mixed letters quotechar lineterm pstdev endpoints deque channels").split()
HONEST_HEAD = "I worked through the sum one column at a time and checked it twice, so the value is right."


@pytest.mark.parametrize("padding", [
    " ".join(SALAD),                                                                    # word salad
    " ".join("".join(random.Random(i).choice(c) for c in ("bcdfgklmnprst", "aeiou", "bdklmnt", "aeiou"))
             for i in range(45)),                                                       # syllable soup
    "lorem ipsum dolor sit amet " * 9,
    " ".join(f"word{i}" for i in range(45)),
    "very " * 44 + "good",
    "I think the answer is five because it is. " * 6,                                  # one sentence said over and over
    HONEST_HEAD + " " + " ".join(SALAD[:30]),                                           # prose, then salad
    "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(45)),                      # random ideographs
])
def test_a_word_minimum_counts_only_words_in_prose(padding):
    r = _bench("Compute 17 + 19. Reply in at least 40 words.", {"type": "min_words", "value": 40}, "36")
    assert verdict(f"The answer is 36. {padding}", r)[0] == 0.0


HONEST_EN = [
    "Cats are small carnivorous mammals that people have kept as companions for thousands of years. They are agile "
    "hunters with sharp claws, keen hearing and excellent night vision. Most domestic cats sleep for much of the day "
    "and become active at dusk, when their wild ancestors hunted mice and birds in the open. A healthy cat grooms "
    "itself several times a day, and many owners notice that their pet follows a steady routine of meals, naps and "
    "play. Cats communicate with purrs, chirps and body language, and a slow blink is often read as a sign of trust. "
    "Give a new cat a quiet room for its first few days.",
    "To install the package, create a virtual environment first and activate it. Then run pip with the name of the "
    "package and wait for the download to finish. If the installer reports a missing compiler, install the build "
    "tools for your platform and try again. Once the package is installed, import it in a Python shell to check "
    "that the version matches the one in your requirements file. Keep the environment separate from the system "
    "interpreter, because upgrading a shared library can break other programs that depend on an older release. "
    "Write the steps down so that the next person can repeat them.",
    "The French Revolution began in 1789 and changed the political map of Europe. Food shortages, heavy taxes and "
    "the debts of the crown left many citizens angry with the old order. When the Estates-General met at "
    "Versailles, the representatives of the common people declared themselves a National Assembly. Within weeks a "
    "crowd stormed the Bastille, and the king was forced to accept limits on his power. Over the next decade the "
    "country moved from a constitutional monarchy to a republic, through years of war and terror, and finally to "
    "the rule of Napoleon, who crowned himself emperor in 1804. "
    "Its ideas of rights and citizenship spread far beyond France.",
    "To find the sum of 55 and 19, add the ones first: five plus nine is fourteen, so write four and carry one. "
    "Then add the tens with the carried one: five plus one plus one is seven. The result is 74. You can check it by "
    "subtracting 19 from 74, which gives back 55, the number we started with. This way of working column by column "
    "is reliable for large numbers too, as long as each carry is written down and added to the next column before "
    "moving on to the left. Checking with the inverse operation catches most slips "
    "before they spread into later steps of the work.",
]
HONEST_ZH = [
    "猫是一种很受欢迎的家养动物。它们身体灵活，听觉和夜视能力都很好。大多数家猫白天会睡很长时间，到了傍晚才变得活跃，"
    "这和它们的野生祖先在黄昏时捕猎老鼠和小鸟的习惯有关。猫每天会多次舔毛来保持身体清洁，很多主人也会发现自己的猫有固定的作息，"
    "按时吃饭、睡觉和玩耍。猫通过呼噜声、叫声和身体姿态来交流，慢慢眨眼常常被看作信任的表现。",
    "安装这个软件包之前，最好先创建一个虚拟环境并激活它。然后用包管理工具安装，等下载完成。如果安装程序提示缺少编译器，"
    "就需要先为你的系统安装构建工具，再重新尝试。安装完成以后，可以在交互环境里导入它，检查版本是否和需求文件中的一致。"
    "请把这个环境和系统自带的解释器分开，因为升级共享的库可能会让依赖旧版本的其他程序无法正常运行。",
    "计算五十五加十九的时候，先算个位：五加九等于十四，写四进一。再算十位：五加一再加上进位的一，等于七。所以结果是七十四。"
    "我们可以用减法来检验：七十四减去十九，得到五十五，正好是开始的那个数。这种按位计算的方法对于很大的数也同样可靠，"
    "只要每次进位都记下来，并在计算下一位之前加上去。用逆运算来检查，可以发现大部分的粗心错误。",
]


@pytest.mark.parametrize("text", HONEST_EN)
def test_honest_english_paragraphs_meet_a_hundred_word_minimum(text):
    assert len(text.split()) >= 100
    r = row("Write at least 100 words about this topic: " + text[:60], [{"type": "min_words", "value": 100}])
    assert verdict(text, r) == (1.0, "constraints_met"), count_real_words(text)


@pytest.mark.parametrize("text", HONEST_ZH)
def test_honest_chinese_paragraphs_meet_a_hundred_word_minimum(text):
    r = row("请写至少120个字，主题：" + text[:12], [{"type": "min_words", "value": 120}])
    assert verdict(text, r) == (1.0, "constraints_met"), count_real_words(text)


DAY = "What day comes after Monday?"


@pytest.mark.parametrize("reply,r", [
    ('{"answer": "not Tuesday"}', row(DAY + ' Reply in JSON as {"answer": ...}.', JSON, "Tuesday")),
    ('{"answer": "not 5"}', row("Compute 2 + 3. Reply in JSON.", JSON, "5")),
    ('{"answer": "不是星期二"}', row("星期一之后是星期几？用 JSON 回答。", JSON, "星期二")),
    ('{"answer": 30, "answer": 29}', row("Compute 14 + 15. Reply in JSON.", JSON, "29")),
    ('{"answer": {"value": 30, "value": 29}}', row("Compute 14 + 15. Reply in JSON.", JSON, "29")),
    ('{"answer": "5 or nested"}', row("Compute 2 + 3. Reply in JSON.", JSON, "5")),
    ('{"answer": "5", "note": "maybe"}', row("Compute 2 + 3. Reply in JSON.", JSON, "5")),
    ("The answer is not 36.", row("Compute 55 - 19.", NO_THINK, "36")),                 # invented: plain-text negation
    ("It isn't Tuesday.", row(DAY, NO_THINK, "Tuesday")),
    ("anything except Tuesday", row(DAY, NO_THINK, "Tuesday")),
    ("Tuesday is wrong", row(DAY, NO_THINK, "Tuesday")),
    ("答案不是36", row("计算 55 - 19。", NO_THINK, "36")),
    ("maybe 36", row("Compute 55 - 19.", NO_THINK, "36")),          # invented: a hedge by the number
    ("36 or so", row("Compute 55 - 19.", NO_THINK, "36")),
])
def test_a_negated_hedged_or_duplicated_answer_earns_nothing(reply, r):
    assert verdict(reply, r)[0] == 0.0


@pytest.mark.parametrize("reply,r", [
    ('{"answer": "Tuesday"}', row(DAY + ' Reply in JSON as {"answer": ...}.', JSON, "Tuesday")),
    ('{"answer": 29, "working": "14 + 15 = 29"}', row("Compute 14 + 15. Reply in JSON.", JSON, "29")),
    ("Tuesday. It is not a weekend day.", row(DAY, NO_THINK, "Tuesday")),
    ("36. It is not a negative number.", row("Compute 55 - 19.", NO_THINK, "36")),
])
def test_an_answer_stated_plainly_still_pays(reply, r):
    assert verdict(reply, r) == (1.0, "constraints_met")
