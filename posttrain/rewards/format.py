"""Response shape: exactly one think block, then exactly one boxed answer."""
from __future__ import annotations

from posttrain.chat import THINK_OPEN, parse_response

FORMAT_VERSION = "format/1"


def mode_ok(response: str, thinking: bool = True) -> bool:
    """The thinking-mode switch alone (Qwen3): one closed think block first, with reasoning under
    /think and empty under /no_think, whatever the answer after it looks like."""
    parsed = parse_response(response)
    if not parsed.closed or parsed.think_blocks != 1 or not response.lstrip().startswith(THINK_OPEN):
        return False
    return bool((parsed.reasoning or "").strip()) == thinking


def format_ok(response: str, thinking: bool = True) -> bool:
    """The mode switch plus exactly one boxed answer after the think block."""
    if not mode_ok(response, thinking):
        return False
    answer = parse_response(response).answer
    return answer.count("\\boxed{") == 1 and THINK_OPEN not in answer
