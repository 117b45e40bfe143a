"""Response shape: exactly one think block, then exactly one boxed answer."""
from __future__ import annotations

import re
import unicodedata

from posttrain.chat import THINK_CLOSE, THINK_OPEN, has_think_marker, parse_response, visible
from posttrain.rewards.math.extract import find_boxes

# format/4: reasoning needs three content tokens (no single letters, fillers, bare counting or the
# prompt copied); a think-like marker in the answer part (`<thinking>`, `＜think＞`) follows no mode
FORMAT_VERSION = "format/4"

# Words that say nothing about the problem: hesitation, assent, "let me think". Single letters and
# Latin one-character tokens never count either (`b e c`).
_FILLER = frozenset("""
    hmm hm hmmm mm um umm uh uhh er erm ah oh ooh eh ok okay okey k well so um let lets me think thinking
    thought sure yes yeah yep yup no nope nah right alright fine good great nice cool wait now then i im
    the a an is it its this that and or to of in on just like done answer see got guess maybe really
    actually basically oops huh wow
    嗯 好 的 啊 哦 吧 呃 嘛 呢 哈 唔 额 噢 喔 我 想 是 了 吗 对 行 让
""".split())
_FILLER_RE = re.compile(r"h+m+|m+h*|u+m+|u+h+|e+r+m*|a+h+|o+h+|o+k+(?:a+y+)?|h+u+h+|y+e+s+|n+o+|l+o+l+|z+")
# Arithmetic in the reasoning: numbers joined by `=` or an operator word (`7+8=15`, `71 plus 37 is
# 108`, `37加48等于85`), or an operation followed by a result (`559+449: so 1008`; the question
# copied, `Compute 26 - 72.`, states none). Only then do numbers count as content: `1 2 3` is
# counting, not working.
_ARITHMETIC = re.compile(r"\d\s*(?:=|plus|minus|times|divided|multiplied|equals|加|减|乘|除|等于)\s*-?\d"
                         r"|\d\s*[-+×*/÷·]\s*\d+\D+\d", re.I)
# An arithmetic step as the world's traces write it: `7+8=15`, `4×7=28`, `13-5-8=0` (starting at a
# chain's first number only, so a long `1+1+1...` without `=` is read once: linear time).
_STEP = re.compile(r"(?<![\d.+\-×*/÷·])\d+(?:[-+×*/÷·]\d+)+=-?\d+")
MIN_CONTENT = 3   # distinct content tokens a think block needs
# of them, not in the prompt (where the prompt is known): the question copied is no reasoning; the
# question's operation and its result (`559+449: so 1008`, the world's answer-only form) is
MIN_NEW = 1


def _content(token: str, arithmetic: bool) -> bool:
    if token[0].isdigit():
        return arithmetic
    if len(token) == 1 and not unicodedata.category(token).startswith("Lo"):
        return False   # a Latin (Greek, Cyrillic) letter alone: `b e c`, `x`
    return token not in _FILLER and not _FILLER_RE.fullmatch(token)


def content_tokens(text: str) -> set[str]:
    """The distinct tokens of text that carry content (`substantive`'s count): words, numbers in
    arithmetic, and each arithmetic step (`7+8=15`) as one token of its own."""
    from posttrain.rewards.instruction_text import tokens

    text = unicodedata.normalize("NFKC", text)
    steps = {m.group(0) for m in _STEP.finditer(text)}
    arithmetic = bool(steps) or _ARITHMETIC.search(text) is not None
    return steps | {t for t in tokens(text) if _content(t, arithmetic)}


def substantive(reasoning: str | None, prompt: str | None = None) -> bool:
    """Reasoning with content: at least `MIN_CONTENT` distinct content tokens, words of two letters or
    more (a CJK ideograph is a word) that are no filler (`hmm ok`, `let me think`, `嗯 好的`), and numbers
    where the reasoning does arithmetic (`7+8=15`, `71 plus 37 is 108`; `1 2 3` counts nothing).
    Where the prompt is known, `MIN_NEW` of them must not be in it (the question copied is not
    thinking). One character, a repeated token, invisible characters, `b e c`, two dictionary words:
    an empty think block dressed up. The one rule for format, mode, language and length rewards and
    evaluation's language consistency. Linear time."""
    if not reasoning or not visible(reasoning):
        return False
    shown = sum(not ch.isspace() and unicodedata.category(ch) != "Cf" for ch in reasoning)
    if shown <= 2:
        return False
    content = content_tokens(reasoning)
    if len(content) < MIN_CONTENT:
        return False
    if not prompt:
        return True
    from posttrain.rewards.instruction_text import tokens

    return len(content - set(tokens(prompt))) >= MIN_NEW


def mode_ok(response: str, thinking: bool | None = True, prompt: str | None = None) -> bool:
    """The thinking-mode switch alone (Qwen3): one closed think block first, with reasoning that has
    content (`substantive`) under /think and none under /no_think, then an answer, whatever it
    looks like, without a think-like marker (`has_think_marker`: reasoning in look-alike markers
    after the block). A reply with no answer after its think block, or a second </think>, follows no
    mode. `thinking=None` (a prompt rendered without a mode) takes either mode's shape, but not the
    degenerate reasoning in between."""
    parsed = parse_response(response)
    if parsed.think_blocks != 1 or parsed.closes != 1 or not response.lstrip().startswith(THINK_OPEN):
        return False
    if not visible(parsed.answer) or has_think_marker(parsed.answer):
        return False
    empty = not visible(parsed.reasoning or "")
    if thinking is None:
        return empty or substantive(parsed.reasoning, prompt)
    return empty if not thinking else substantive(parsed.reasoning, prompt)


def thinks_honestly(response: str, thinking: bool | None, prompt: str | None = None) -> bool:
    """No degenerate reasoning (visible but without content), and content where the mode thinks."""
    reasoning = parse_response(response).reasoning
    if thinking:
        return substantive(reasoning, prompt)
    return not visible(reasoning or "") or substantive(reasoning, prompt)


def format_ok(response: str, thinking: bool | None = True, prompt: str | None = None) -> bool:
    """The mode switch plus exactly one boxed answer after the think block, closed and not empty."""
    if not mode_ok(response, thinking, prompt):
        return False
    answer = parse_response(response).answer
    if answer.count("\\boxed{") != 1 or THINK_OPEN in answer or THINK_CLOSE in answer:
        return False
    boxes = find_boxes(answer)
    return len(boxes) == 1 and boxes[0] is not None and visible(boxes[0])
