"""The words the instruction guard reads (posttrain.rewards.instruction_guard): its lexicons (filler,
instruction words, canned and hedging replies, function words, in English and Chinese) and how many
words of prose a reply holds, glued runs and repeats counted as a reader would."""
from __future__ import annotations

import re
import unicodedata
from collections import Counter
from functools import lru_cache

from posttrain.rewards.instruction_text import _CJK, _GLUED_DIGITS, _KANA_HANGUL, _LETTERS, _real_word

# ---------------------------------------------------------------- lexicons

# Words that carry no topic: stop words, interjections, talk about answering, placeholder text and
# the lorem ipsum vocabulary. Not words with a meaning of their own that an answer can be ("up",
# "down", "all", "many", "right", "new"). Tokens as `tokens` makes them ("don't" is "don" and "t").
FILLER = frozenset("""
a an the this that these those it its itself i me my mine myself we us our you your yours he him his she her
they them their there here is am are was were be been being do does did doing done have has had having will
would shall should can could may might must not don doesn didn isn aren wasn weren won wouldn shouldn couldn
cannot ll ve re s t m d of to in on at by for with from as into onto about so then than too very just also
and or but if because while what which who whom whose when where why how any each every some such other
another both either neither whether nor
yes yeah yep yup no nope nah ok okay sure certainly absolutely definitely indeed fine great good
nice cool alright well oh ah uh um umm hmm huh wow lol haha hi hello hey bye goodbye thanks thank please
sorry welcome done finished complete completed ready noted understood acknowledged agreed agree got gotcha
whatever nothing something anything everything none na idk dunno know knew unsure unknown idea maybe perhaps
possibly probably hope helps help helpful happy glad assist assistance assistant ai question questions answer
answers answered reply replies response responses respond responding below above following let see
foo bar baz qux asdf qwerty placeholder blah etc xyz
""".split()) | (LOREM := frozenset("""
lorem ipsum dolor sit amet consectetur consectetuer adipiscing adipisicing elit sed eiusmod tempor incididunt
ut labore et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris nisi aliquip ex
ea commodo consequat duis aute irure reprehenderit voluptate velit esse cillum fugiat nulla pariatur excepteur
sint occaecat cupidatat non proident sunt culpa qui officia deserunt mollit anim id est laborum
""".split()))
# Words about the form of a reply, which every instruction prompt has: not the prompt's topic, and
# not content in a reply ("Here is my reply in lowercase letters").
INSTRUCTION_WORDS = frozenset("""
reply replies respond response answer word words letter letters lowercase uppercase capital capitals case
json object key keys format formatted end ending start starting begin beginning finish finishing must only
use using avoid without thinking think directly english chinese language comma commas punctuation write
written give tell say provide list explain describe name make create compose generate output sentence
sentences paragraph paragraphs least than following wrap quotation quotes mark marks
title section sections bullet points highlight response entire whole system user assistant
""".split())
# Replies that fit any prompt, as single words: a case or language rule met by these alone is vacuous.
CANNED = frozenset("ok okay yes yeah yep yup no nope nah sure thanks thank you done fine hi hello hey bye lol "
                   "hmm um uh na idk".split())
HEDGE_WORDS = frozenset("or either maybe perhaps possibly probably might alternatively".split())
# Chinese has no spaces, so its filler is removed as phrases before tokenising (one ideograph a token).
_ZH_FILLER = re.compile("|".join(sorted("""
这是我的回答 希望这对你有帮助 希望对你有帮助 希望有帮助 回答如下 答案如下 我的回答 不知道 没问题 好的 是的 不是 谢谢
多谢 完成 完毕 没有 当然 可以 嗯 哦 啊 呃 好 是 的 了 吗 呢 吧 我 你 这 那
""".split(), key=len, reverse=True)))
_ZH_INSTRUCTION = re.compile("|".join(sorted("""
最后一个词 大写字母 小写字母 全部使用 不能出现 这个词 不超过 请用 请以 回答 作答 格式 形如 对象 给出 结果 必须 开头
结尾 不要 思考 直接 最多 个词 只用 使用 中文 英文 答案 写出 说出 请 用 以
""".split(), key=len, reverse=True)))
_ZH_HEDGE = re.compile("或者|或许|还是|也许|可能|大概|或")
# Items of a list or short sentences: an answer said among others as short ("Monday, Sunday",
# "Monday. Sunday.") is a hedge.
_LIST_SEPARATORS = re.compile(r"[,，、;；/|\n.。!！?？]")
_NOVEL_LIMIT = 4   # content words beyond the answer a short-answer reply may add (an ideograph: half)

# ---------------------------------------------------------------- counting words

# Closed-class English words (articles, pronouns, auxiliaries, prepositions, conjunctions) and the
# most frequent Chinese characters. Their measured shares: the honest paragraphs of
# tests/test_instruction_guard.py 39-49% (English; 12-word blocks 25-67%) and 40-52% (Chinese);
# word salad from the bench's 2,259-word dictionary 3.8%; syllable soup, random ideographs under 1%.
FUNCTION_WORDS = frozenset("""
a an the this that these those it its i me my we us our ours you your he him his she her they them their there here
is am are was were be been being do does did have has had will would shall should can could may might must not no
of to in on at by for with from as into onto about than then so and or but if because while when where what which
who whom whose how all any each every some such other another both either neither nor also just too only more most
much many up out over under after before between through during without within again off down upon yet still even
ever never dont doesnt didnt isnt arent wasnt im ive its thats theres
""".split())
_ZH_FUNCTION = frozenset("的一是不了在人有我他这个们中来上大为和国地到以说时要就出会可也你对生能而子那得于着下自之年过发后作里用道"
                         "行所然家种事成方多经么去法学如都同现当没动面起看定天分还进好小部其些主样理心她本前开但因只从想实它与把"
                         "很最并或等被将让给向每如虽且再已又才更吗呢吧")   # about the 150 most frequent characters
_BLOCK = 12            # words judged together: a block reads as prose with 2 function words or more (1/6)
_REPEATS = 4   # a word counts at most this often, or a 25th of the words so far (a function word: a 5th)


def _word_units(prose: str):
    """(key, is a function word, is a word) per word in order: an ideograph each; otherwise a whitespace chunk is at most
    one word ("well-known"), none when it glues letters to digits ("word0"), holds no real word or is lorem ipsum."""
    known: dict[str, tuple] = {}
    for chunk in prose.split():
        yield from known[chunk] if chunk in known else known.setdefault(chunk, tuple(_chunk_units(chunk)))


def _chunk_units(chunk: str):
    if not chunk.isascii():
        yield from ((ch, ch in _ZH_FUNCTION, True) for ch in _CJK.findall(chunk))
        chunk = _CJK.sub(" ", chunk)
    runs = _LETTERS.findall(chunk)
    if runs:
        key = "".join(runs).casefold()
        real = any(map(_real_word, runs)) and key not in LOREM and not _GLUED_DIGITS.search(chunk)
        yield key, key in FUNCTION_WORDS, real


def prose_words(prose: str, enough: int | None = None) -> int:
    """The count for "at least N words" (`instruction.count_real_words`): real words, only in blocks
    of `_BLOCK` that read as prose (a sixth function words: word salad, syllable soup and random
    ideographs have almost none; a short last block joins the one before), each word at most
    `_REPEATS` times or its share, function words at most 1.5 times the content words plus 4 ("very
    very ... good", a sentence said again and again). Linear; stops at `enough`."""
    seen, content, function, total = Counter(), 0, 0, 0
    units, passed, at = list(_word_units(prose)), True, 0
    while at < len(units):
        block = units[at:] if len(units) - at < _BLOCK + _BLOCK // 2 else units[at:at + _BLOCK]   # a short rest joins
        at += len(block)
        if len(block) >= _BLOCK // 2:
            passed = 6 * sum(f for _, f, _ in block) >= len(block)
        if not passed:
            continue
        for key, is_function, real in block:
            seen[key] += 1
            if real and seen[key] <= max(_REPEATS, at // (5 if is_function else 25)):
                function, content = function + is_function, content + (not is_function)
        total = content + min(function, int(1.5 * content) + 4)
        if enough is not None and total >= enough:
            break
    return total


# Words a reply glues to pass "at most N words" ("theansweris 5"), for `glued_parts`, and real words
# that split into them with a part of four letters or more but are one word ("however", "keyword").
_GLUE_WORDS = FUNCTION_WORDS | INSTRUCTION_WORDS | frozenset("final guess result value total number correct sum".split())
_ONE_WORD = frozenset("""within without whereas whereby wherein thereby therein thereof therewith hereby herein somewhat
cannot another however whatever whenever wherever whoever somewhere somehow anywhere everywhere nowhere forever moreover
thereafter hereafter meanwhile forgive behave keyword keywords outdo overall makeup startup whatnot""".split())
_HUMP = re.compile(r"(?<=[a-z])(?=[A-Z])")
_LONG_RUN = 12   # letters: English running text averages under 5 a word, and few words pass 12


@lru_cache(maxsize=4096)
def _fewest_parts(word: str) -> int:
    """The fewest `_GLUE_WORDS` that spell `word`, one of four letters or more (so "weather" is not
    "we at her"); 1 when none do. A linear-time DP over (parts, no long part yet)."""
    best = [(0, 1)] + [(len(word) + 1, 1)] * len(word)
    for i in range(1, len(word) + 1):
        for j in range(max(0, i - 12), i):
            if best[j][0] <= len(word) and word[j:i] in _GLUE_WORDS:
                best[i] = min(best[i], (best[j][0] + 1, best[j][1] and i - j < 4))
    parts, short = best[-1]
    return parts if not short and parts <= len(word) else 1


def glued_parts(run: str) -> int:
    """How many words a run of letters counts for "at most N words", erring high: its camelCase
    humps ("TheAnswerIs" three), its reading as glued common words, accents aside ("theansweris",
    "MYFINALANSWERIS": three and four), and a run longer than `_LONG_RUN` letters one word per 5
    ("internationalization": four). Over-counting a long real word only makes a limit stricter."""
    humps = len(_HUMP.findall(run)) + 1
    if _KANA_HANGUL.search(run):   # kana and Hangul count per syllable in `count_words`
        return humps
    word = "".join(ch for ch in unicodedata.normalize("NFD", run) if not unicodedata.combining(ch)).casefold()
    parts = max(humps, -(-len(word) // 5) if len(word) > _LONG_RUN else 1)
    if 4 <= len(word) <= 40 and word not in _GLUE_WORDS and word not in _ONE_WORD:
        parts = max(parts, _fewest_parts(word))
    return parts
