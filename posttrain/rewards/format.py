"""Response shape: exactly one think block, then exactly one boxed answer."""
from __future__ import annotations

import unicodedata

from posttrain.chat import THINK_CLOSE, THINK_OPEN, parse_response, visible
from posttrain.rewards.math.extract import find_boxes

FORMAT_VERSION = "format/3"   # reasoning needs content; a prompt without a mode accepts either


def substantive(reasoning: str | None) -> bool:
    """Reasoning with content: at least two different words or numbers, and more than two visible
    characters. One character, a repeated token or invisible characters (`<think>\\na\\n</think>`,
    `<think>ok ok ok</think>`) is an empty think block dressed up, not thinking."""
    from posttrain.rewards.instruction import tokens

    if not reasoning or not visible(reasoning):
        return False
    shown = sum(not ch.isspace() and unicodedata.category(ch) != "Cf" for ch in reasoning)
    return shown > 2 and len(set(tokens(reasoning))) >= 2


def mode_ok(response: str, thinking: bool | None = True) -> bool:
    """The thinking-mode switch alone (Qwen3): one closed think block first, with reasoning that has
    content (`substantive`) under /think and none under /no_think, then an answer, whatever it
    looks like. A reply with no answer after its think block, or a second </think>, follows no
    mode. `thinking=None` (a prompt rendered without a mode) takes either mode's shape, but not the
    degenerate reasoning in between."""
    parsed = parse_response(response)
    if parsed.think_blocks != 1 or parsed.closes != 1 or not response.lstrip().startswith(THINK_OPEN):
        return False
    if not visible(parsed.answer):
        return False
    empty = not visible(parsed.reasoning or "")
    if thinking is None:
        return empty or substantive(parsed.reasoning)
    return empty if not thinking else substantive(parsed.reasoning)


def thinks_honestly(response: str, thinking: bool | None) -> bool:
    """No degenerate reasoning (visible but without content), and content where the mode thinks."""
    reasoning = parse_response(response).reasoning
    if thinking:
        return substantive(reasoning)
    return not visible(reasoning or "") or substantive(reasoning)


def format_ok(response: str, thinking: bool | None = True) -> bool:
    """The mode switch plus exactly one boxed answer after the think block, closed and not empty."""
    if not mode_ok(response, thinking):
        return False
    answer = parse_response(response).answer
    if answer.count("\\boxed{") != 1 or THINK_OPEN in answer or THINK_CLOSE in answer:
        return False
    boxes = find_boxes(answer)
    return len(boxes) == 1 and boxes[0] is not None and visible(boxes[0])
