"""Response shape: exactly one think block, then exactly one boxed answer."""
from __future__ import annotations

from posttrain.chat import THINK_OPEN, parse_response

FORMAT_VERSION = "format/1"


def format_ok(response: str, thinking: bool = True) -> bool:
    """Thinking mode needs non-empty reasoning; non-thinking mode an empty think block (Qwen3)."""
    parsed = parse_response(response)
    if not parsed.closed or parsed.think_blocks != 1 or not response.lstrip().startswith(THINK_OPEN):
        return False
    if bool((parsed.reasoning or "").strip()) != thinking:
        return False
    return parsed.answer.count("\\boxed{") == 1 and THINK_OPEN not in parsed.answer
