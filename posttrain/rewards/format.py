"""Response shape: exactly one think block, then exactly one boxed answer."""
from __future__ import annotations

from posttrain.chat import THINK_CLOSE, THINK_OPEN, parse_response, visible
from posttrain.rewards.math.extract import find_boxes

FORMAT_VERSION = "format/2"


def mode_ok(response: str, thinking: bool = True) -> bool:
    """The thinking-mode switch alone (Qwen3): one closed think block first, with reasoning under
    /think and empty under /no_think, then an answer, whatever it looks like. A reply with no
    answer after its think block, or a second </think>, follows no mode."""
    parsed = parse_response(response)
    if parsed.think_blocks != 1 or parsed.closes != 1 or not response.lstrip().startswith(THINK_OPEN):
        return False
    return visible(parsed.reasoning or "") == thinking and visible(parsed.answer)


def format_ok(response: str, thinking: bool = True) -> bool:
    """The mode switch plus exactly one boxed answer after the think block, closed and not empty."""
    if not mode_ok(response, thinking):
        return False
    answer = parse_response(response).answer
    if answer.count("\\boxed{") != 1 or THINK_OPEN in answer or THINK_CLOSE in answer:
        return False
    boxes = find_boxes(answer)
    return len(boxes) == 1 and boxes[0] is not None and visible(boxes[0])
