"""The guard layer over the instruction checkers: a reply that meets every constraint still earns
nothing unless it is a real answer to its prompt, and each such override is named.

The checkers (posttrain.rewards.instruction) say whether constraint X holds; a policy optimises
against them, and the cheapest way to meet "lowercase" is "ok". So `instruction_verdict` runs the
checkers, then `guard_reason`, and reports `guard:<name>` when the checkers said yes and a guard
said no; training logs every reason as `verifier/<reason>`, so overrides are counted. The guards:

  think_markup   a second `</think>` in the reply
  obfuscated     bidi override controls, letters written as HTML or percent escapes, markup inside
                 a word: a reply that has to be decoded to be read hides something from a checker
  degenerate     no reply at all (`degenerate_reason`: empty, one token repeated, padding, ...)
  wrong_answer   the row has a reference answer and the reply does not state it, or denies it ("not 36")
  hedged         the reply states the answer and also a competing one ("36 or 35", two boxes, a
                 JSON field per guess, "Monday, Sunday", the answer's frame with another filling)
  generic        nothing but filler: stop words, "ok", "sure", "I hope this helps", lorem ipsum
  copies_prompt  nothing but the prompt's own words
  off_topic      a row without a reference: the reply shares no content word with the prompt's topic
  vacuous        a case or language rule met only by a canned word ("OK 36" in capitals)

Engagement is judged by what the row lets us check. With a reference answer the reply must state
it, unhedged (a correct short reply shares nothing else with the prompt: "Sunday" to "What day
comes after Saturday?"). Where a language constraint asks for another language than the
reference is written in, the reply is a translation and cannot be compared word for word: it must
then hold content words of its own. Without a reference, the reply must take up the prompt's
topic (a content word stem in common, instruction words such as "reply" or "lowercase" left out)
and add a word the prompt does not have; a short factual question stored without its answer
cannot be checked, so such rows need their answer. Without a prompt, only the filler test applies.
"""
from __future__ import annotations

import re
import unicodedata
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

from posttrain.chat import ParsedResponse, parse_response
from posttrain.rewards.instruction_text import _BIDI_OVERRIDE, _CJK, _LETTER, _json_body, _load_json, _unmarked, fold_text, tokens
from posttrain.rewards.instruction import _content, check_constraint, parse_constraints
from posttrain.rewards.language import language_share
from posttrain.rewards.math.extract import find_boxes
from posttrain.rewards.instruction_words import (
    _LIST_SEPARATORS, _NOVEL_LIMIT, _ZH_FILLER, _ZH_HEDGE, _ZH_INSTRUCTION, CANNED, FILLER, HEDGE_WORDS, INSTRUCTION_WORDS,
)

# ---------------------------------------------------------------- degenerate replies

# A reply of this many tokens or more that uses at most a fifth as many distinct ones is padding
# ("the the ... the end" to reach a word count); natural English or Chinese of that length uses over
# twice that share.
_PADDING_MIN_TOKENS = 20
_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*")


def _prefix_function(units: list) -> list[int]:
    """KMP's prefix function: linear time, so no reply can make a guard hang."""
    prefix = [0] * len(units)
    for i in range(1, len(units)):
        k = prefix[i - 1]
        while k and units[i] != units[k]:
            k = prefix[k - 1]
        prefix[i] = k + (units[i] == units[k])
    return prefix


def _one_block_repeated(units: list[str]) -> bool:
    """The whole reply is one token or phrase said at least twice ("the the", "ok ok ok", a loop; a
    cut-off last repeat included): its shortest period is at most half its length."""
    n = len(units)
    return n >= 2 and n - _prefix_function(units)[-1] <= n // 2


def _is_word(token: str) -> bool:
    """A CJK ideograph or at least two letters: one Latin letter ("A") is not an answer."""
    return bool(_CJK.fullmatch(token)) or (len(token) >= 2 and not token[0].isdigit())


def _json_values(answer: str) -> list | None:
    """The leaf values of a JSON reply (its keys are the format, not the answer); None if not JSON."""
    body = _json_body(answer)
    if not body.startswith(("{", "[")):
        return None
    try:
        obj = _load_json(body)
    except (ValueError, RecursionError):
        return None
    leaves, stack = [], [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
        elif item is not None and not isinstance(item, bool):
            leaves.append(item)
    return leaves


def _body(answer: str) -> str:
    """What a reply says: a JSON reply's values, space-joined, or the reply itself."""
    leaves = _json_values(answer)
    return answer if leaves is None else " ".join(str(v) for v in leaves)


def degenerate_reason(answer: str, reference: str | None = None) -> str | None:
    """Why `answer` (the reply after its think block) is no real reply; None when it is one.

    A real reply has at least one content token of the kind the task asks for: a number when the
    task's reference answer is a number, otherwise a word (a CJK ideograph, or a run of two or more
    letters). So these are degenerate: empty text, only special tokens (`<|im_end|>`), markup or
    punctuation, a single letter, digits alone where the task does not ask for a number (or has no
    reference), any reply that is one token or phrase repeated, and padding (`_PADDING_MIN_TOKENS`).
    A JSON reply is judged by its values. Whether the reply is right is `guard_reason`'s question."""
    units = tokens(_body(answer))
    if not units:
        return "no words: empty, or only special tokens, markup and punctuation"
    if len(units) >= 2 and _one_block_repeated(units):
        return "one token or phrase repeated"
    if len(units) >= _PADDING_MIN_TOKENS and len(set(units)) * 5 <= len(units):
        return "a few tokens said over and over (padding)"
    numeric_task = reference is not None and _NUMBER.fullmatch(str(reference).strip()) is not None
    if numeric_task:
        return None if any(u[0].isdigit() for u in units) else "the task asks for a number and the reply has none"
    if any(_is_word(u) for u in units):
        return None
    return "no content word: only digits or single letters"


# ---------------------------------------------------------------- reading a text

_SUFFIX = re.compile(r"(?:ing|ed|es|s|ly)$")


def _stem(token: str) -> str:
    """A light English stem, so "seas" meets "sea" and "writing" "write"; other scripts unchanged."""
    if len(token) <= 3 or not token.isascii() or not token.isalpha():
        return token
    stem = token[:-3] + "y" if token.endswith("ies") else _SUFFIX.sub("", token)
    if len(stem) < 3:
        return token
    if len(stem) >= 4 and stem[-1] == stem[-2]:
        stem = stem[:-1]   # running -> runn -> run
    return stem[:-1] if stem.endswith("e") and len(stem) > 3 else stem


def _substantive(token: str) -> bool:
    """A content word: not filler, not talk about the reply's form, not a number, not one letter."""
    return token not in FILLER and token not in INSTRUCTION_WORDS and _is_word(token)


_fold = lru_cache(maxsize=16)(fold_text)   # the guards read one reply several ways


@lru_cache(maxsize=16)
def _units(text: str) -> tuple[str, ...]:
    """Folded tokens of `text` without Chinese filler phrases (which tokenise per ideograph)."""
    folded = _fold(text)
    return tuple(tokens(_ZH_FILLER.sub(" ", folded) if _CJK.search(folded) else folded))


class _Prompt:
    """What the guards read from the prompt: its numbers, its non-filler stems (all of them, and
    its topic: instruction words and the constraints' own words left out) and its token n-grams."""

    def __init__(self, prompt: str, constraints: list[dict]):
        self.tokens = tokens(_fold(prompt))
        self.words = set(_units(prompt)) - FILLER
        self.stems = {_stem(u) for u in self.words}
        dictated = set()
        for c in constraints:
            for value in [c.get("value"), *(c.get("words") or [])]:
                dictated.update(_units(str(value)) if value is not None else ())
        folded = _fold(prompt)
        topic_text = _ZH_FILLER.sub(" ", _ZH_INSTRUCTION.sub(" ", folded)) if _CJK.search(folded) else folded
        self.topic = {_stem(u) for u in tokens(topic_text) if u not in dictated and
                      (_CJK.fullmatch(u) or len(u) > 1 and u not in FILLER and u not in INSTRUCTION_WORDS)}
        self.heads = {t[:3] for t in self.topic}   # a stem is a prefix of its word: a cheap first test
        self.numbers = {abs(n) for n in _numbers(prompt)}

    def knows(self, unit: str) -> bool:
        return unit in self.words or _stem(unit) in self.stems

    def on_topic(self, units) -> bool:
        return any(u[:3] in self.heads and _stem(u) in self.topic for u in set(units))

    def ngrams(self, n: int) -> set[tuple[str, ...]]:
        return {tuple(self.tokens[i:i + n]) for i in range(len(self.tokens) - n + 1)}


# A number: thousands groups and a decimal part; a sign only where it cannot be a minus ("55-19");
# not the digits of a name ("H2O", "CO2").
_VALUE = re.compile(r"(?:(?<![\w)\].])[-−])?(?<![A-Za-z\d.])\d+(?:,\d{3})*(?:\.\d+)?")
_PLAIN_NUMBER = re.compile(r"[-+−]?\d+(?:,\d{3})*(?:\.\d+)?")


def _numbers(text: str) -> list[Decimal]:
    return [Decimal(m.replace(",", "").replace("−", "-"))
            for m in _VALUE.findall(unicodedata.normalize("NFKC", text))]


# ---------------------------------------------------------------- the answer

def _numeric_reason(content: str, reference: Decimal, prompt: _Prompt | None) -> str | None:
    """A number answer: the reply's claimed values are exactly the reference. Claims are the boxes
    (each must hold a number), or a JSON reply's number-valued fields; every other number must be
    the reference or one of the prompt's (working quotes the operands: "55 - 19 = 36"). A number
    of neither kind is a second candidate, unless the answer is claimed in a box or field and the
    number is not offered as an alternative (a hedge word: "or", "maybe", "或"). Without the prompt
    every other number is a candidate."""
    leaves = _json_values(content)
    claims: list[Decimal] = []
    text = content
    if leaves is not None:
        words = []
        for v in leaves:
            if isinstance(v, (int, float)) or _PLAIN_NUMBER.fullmatch(v.strip()):
                claims.append(Decimal(str(v).strip().replace(",", "").replace("−", "-")))
            else:
                words.append(v)
        text = " ".join(words)
    else:
        for box in find_boxes(content):
            found = _numbers(box or "")
            if not found:
                return "wrong_answer"
            claims += found
    known = prompt.numbers if prompt else set()
    mentioned = _numbers(text)
    others = [n for n in mentioned if n != reference and abs(n) not in known]
    if claims:
        if reference not in claims:
            return "wrong_answer"
        hedge = any(t in HEDGE_WORDS for t in tokens(text)) or _ZH_HEDGE.search(text)
        return "hedged" if any(n != reference for n in claims) or (others and hedge) else None
    if reference not in mentioned:
        return "wrong_answer"
    return "hedged" if others else None


def _occurrences(units: list[str], part: list[str]) -> list[int]:
    """Start indices of `part` in `units`: a substring search over the tokens joined by a
    separator no token holds (C speed, linear), indices counted between successive hits."""
    if not part:
        return []
    text, needle = "\0" + "\0".join(units) + "\0", "\0" + "\0".join(part) + "\0"
    starts, index, last = [], 0, 0
    while (found := text.find(needle, last if not starts else last + 1)) >= 0:
        index += text.count("\0", last, found)
        starts.append(index)
        last = found
    return starts


def _frame_reused(units: list[str], want: list[str], prompt: _Prompt | None) -> bool:
    """The answer's frame with another filling: "星期一 ... 星期日", "one hundred and thirty-five,
    one hundred and thirty-four". Echoes of the prompt ("星期六之后是星期日") are not candidates."""
    if len(want) < 2:
        return False
    seen = prompt.ngrams(len(want)) if prompt else set()
    for frame, at_start in ((want[:-1], True), (want[1:], False)):
        if not any(_substantive(t) for t in frame):
            continue
        for i in _occurrences(units, frame):
            j = i + len(frame) if at_start else i - 1
            if 0 <= j < len(units):
                candidate = tuple(frame + [units[j]]) if at_start else tuple([units[j]] + frame)
                if list(candidate) != want and candidate not in seen:
                    return True
    return False


def _text_reason(content: str, reference: str, prompt: _Prompt | None) -> str | None:
    """A word answer: the reply states it (its tokens in order, folded: case, width, script) and no
    competitor: no hedge word, no list of short items with another candidate, not the answer's
    frame refilled, and at most `_NOVEL_LIMIT` content words beyond the answer and the prompt's."""
    body = _body(content)
    units = tokens(_fold(body))
    want = tokens(_fold(reference))
    if not _occurrences(units, want):
        return "wrong_answer"
    if any(u in HEDGE_WORDS and u not in want for u in units) or \
            (_ZH_HEDGE.search(_fold(body)) and not _ZH_HEDGE.search(_fold(reference))):
        return "hedged"
    novel = 0.0
    for u in set(_units(body)) - set(want):
        if _substantive(u) and not (prompt and prompt.knows(u)):
            novel += 0.5 if _CJK.fullmatch(u) else 1
            if novel > _NOVEL_LIMIT:
                return "hedged"
    if _frame_reused(units, want, prompt):
        return "hedged"
    items = [tokens(item) for item in _LIST_SEPARATORS.split(_fold(body))]
    if any(item == want for item in items):
        if any(item != want and len(item) <= len(want) + 1 and
               any(_substantive(u) and not (prompt and prompt.knows(u)) and u not in want for u in item)
               for item in items):
            return "hedged"
    return None


# Words that deny what follows ("not Tuesday", "isn't 36", "except 5", "不是36") or precedes ("Tuesday is wrong").
NEGATIONS = frozenset("not no never neither nor isn wasn aren weren doesn don didn cannot except excluding besides "
                      "than 不 非 没 无 未 否 别".split())
_DISOWNING = frozenset("wrong incorrect false untrue 错".split())


def _disowned(content: str, want: list[str], numeric: bool) -> str | None:
    """`wrong_answer`: a negation within two tokens before the answer, or a disowning word two after;
    for a number, `hedged`: a hedge word that close ("maybe 36", "36 or so") or in a JSON string value."""
    def hedge(text: str, units) -> bool:
        return any(u in HEDGE_WORDS and u not in want for u in units) or bool(_ZH_HEDGE.search(text))
    leaves = _json_values(content) or []
    if numeric and any(isinstance(v, str) and hedge(_fold(v), tokens(_fold(v))) for v in leaves):
        return "hedged"
    units = tokens(_fold(_body(content)))
    for i in _occurrences(units, want):
        before, after = units[max(0, i - 2):i], units[i + len(want):i + len(want) + 2]
        if any(u in NEGATIONS and u not in want for u in before) or any(u in _DISOWNING for u in after):
            return "wrong_answer"
        if numeric and hedge("".join(before) + " " + "".join(after), before + after):
            return "hedged"
    return None


def _copies_prompt(content: str, prompt: _Prompt, answer: list[str]) -> bool:
    """Nothing but the prompt's own words. With a reference, the answer may itself be a prompt word
    ("Write train in capital letters": "TRAIN"), so a copy is a reply with no word of its own that
    recites at least two other prompt words and half of them."""
    mine = set(_units(_body(content))) - FILLER
    if not mine or not all(prompt.knows(u) for u in mine):   # stops at the first word of its own
        return False
    if not answer:
        return True
    given = {_stem(u) for u in answer}
    rest, theirs = {_stem(u) for u in mine} - given, prompt.stems - given
    return len(rest) >= 2 and 2 * len(rest) >= len(theirs)


def _translated(reference: str, constraints: list[dict]) -> bool:
    """A language constraint asks for another script than the reference is written in."""
    for c in constraints:
        if c["type"] == "language":
            share = language_share(reference, c["language"]) if c["language"] in ("en", "zh") else 0.0
            if share is not None and share < 0.5:
                return True
    return False


# ---------------------------------------------------------------- the guards

_ENCODED = re.compile(r"&#(?:[xX]([0-9a-fA-F]{1,6})|([0-9]{1,7}));?|%([0-9a-fA-F]{2})")
_INLINE_TAG = r"</?(?:a|b|i|u|s|em|strong|span|font|mark|small|sub|sup|del|ins|code|q)\b[^<>]{0,50}>"
_MARKUP_IN_WORD = re.compile(rf"{_LETTER}(?:<!--.{{0,200}}?-->|{_INLINE_TAG})+{_LETTER}", re.S | re.I)


def _obfuscated(answer: str) -> bool:
    """Bidi overrides (text shown in another order than it is stored), ASCII letters or digits
    written as character references or percent escapes ("&#97;nswer", "%61"), or markup inside a
    word ("ans<!-- -->wer"): nothing an honest reply needs, everything a checker may misread."""
    if _BIDI_OVERRIDE.search(answer) or _MARKUP_IN_WORD.search(answer):
        return True
    for m in _ENCODED.finditer(answer):
        code = int(m.group(1) or m.group(3), 16) if m.group(1) or m.group(3) else int(m.group(2))
        if code < 128 and chr(code).isalnum():
            return True
    return False


def _vacuous(content: str, constraints: list[dict], reference: str | None) -> bool:
    """A case or language rule met only by canned words ("OK 36" in capitals, "的 36" in Chinese)."""
    allowed = set(tokens(reference or ""))
    units = tokens(content)
    for c in constraints:
        if c["type"] in ("uppercase", "lowercase"):
            cased = [u for u in units if u.upper() != u.lower()]
        elif c["type"] == "language" and c["language"] == "en":
            cased = [u for u in units if u.isascii() and u.isalpha()]
        elif c["type"] == "language" and c["language"] == "zh":
            cjk = _CJK.findall(_ZH_FILLER.sub(" ", _fold(content)))
            if _CJK.search(content) and not cjk and not _CJK.search(reference or ""):
                return True
            continue
        else:
            continue
        if cased and all(u in CANNED and u not in allowed for u in cased):
            return True
    return False


def _engagement_reason(content: str, prompt: _Prompt | None, topical: bool) -> str | None:
    """A reply the row has no answer to check against must say something (`generic`), something of
    its own (`copies_prompt`) and, where `topical`, about the prompt's topic (`off_topic`)."""
    units = _units(_body(content))
    if not any(_substantive(u) for u in units):
        return "generic"
    if prompt is None:
        return None
    if _copies_prompt(content, prompt, []):
        return "copies_prompt"
    if topical and prompt.topic and not prompt.on_topic(units):
        return "off_topic"
    return None


def guard_reason(parsed: ParsedResponse, constraints: list[dict], reference: str | None = None,
                 prompt: str | None = None) -> str | None:
    """The guard that refuses a reply to these (valid) constraints, or None. `reference` is the
    row's answer, `prompt` the text put to the model (`posttrain.rewards.prompt_text`)."""
    if parsed.closes > 1:
        return "think_markup"
    if _obfuscated(parsed.answer):
        return "obfuscated"
    content = _unmarked(_content(parsed.answer, constraints))   # as a reader sees it: "<!-- 36 -->" is not said
    if degenerate_reason(content, reference) is not None:
        return "degenerate"
    seen = _Prompt(prompt, constraints) if prompt and prompt.strip() else None
    if reference is not None and not _translated(reference, constraints):
        numeric = _PLAIN_NUMBER.fullmatch(reference) is not None
        reason = (_numeric_reason(content, Decimal(reference.replace(",", "").replace("−", "-")), seen) if numeric
                  else _text_reason(content, reference, seen)) or _disowned(content, tokens(_fold(reference)), numeric)
        if reason is None and seen and _copies_prompt(content, seen, tokens(_fold(reference))):
            reason = "copies_prompt"
    else:
        reason = _engagement_reason(content, seen, topical=reference is None and not _translated(prompt or "", constraints))
    return reason or ("vacuous" if _vacuous(content, constraints, reference) else None)


def _reference(value: Any) -> str | None:
    """A row's answer as text (a number stored as one included: 0 is an answer); None when it has
    none (missing, null, blank, or not a string or number)."""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return None
    text = unicodedata.normalize("NFKC", str(value)).strip()
    return text if tokens(text) else None


_ERRORS = (ValueError, TypeError, LookupError, AttributeError, RecursionError, ArithmeticError, InvalidOperation)


def instruction_verdict(response: str, constraints: Any, partial: bool = False, *, reference: Any = None,
                        prompt: str | None = None) -> tuple[float, str]:
    """(score, reason) for a reply to an instruction row: `constraints_met` (1.0), `constraints_failed`
    (the checkers said no; with partial=True the score is the share that held, unless a guard
    refuses), `guard:<name>` (the checkers said yes and `guard_reason` no: 0.0),
    `unfinished_thinking`, `invalid_constraints` or `not_text`. Never raises."""
    try:
        constraints = parse_constraints(constraints)
    except _ERRORS:
        return 0.0, "invalid_constraints"
    if not isinstance(response, str):
        return 0.0, "not_text"
    try:
        parsed = parse_response(response)
        if parsed.think_blocks and not parsed.closed:
            return 0.0, "unfinished_thinking"
        held = [check_constraint(response, c) for c in constraints]
        if not all(held) and not partial:
            return 0.0, "constraints_failed"
        guard = guard_reason(parsed, constraints, _reference(reference), prompt if isinstance(prompt, str) else None)
    except _ERRORS:
        return 0.0, "constraints_failed"
    if not all(held):
        return (0.0 if guard else sum(held) / len(held)), "constraints_failed"
    return (0.0, f"guard:{guard}") if guard else (1.0, "constraints_met")
