"""The one place that knows the conversation layout: chat template, mode switch, response shape.

Responses follow Qwen3: `<think>\\n{reasoning}\\n</think>\\n\\n{answer}`; the non-thinking form keeps
an empty think block. The mode is chosen by a `/think` or `/no_think` suffix on the user turn.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
PAD, DOC_END, UNK = "<|pad|>", "<|endoftext|>", "<|unk|>"

# ChatML with {% generation %} markers so TRL's assistant_only_loss masks everything but replies.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def user_turn(question: str, thinking: bool | None) -> dict:
    """`thinking=None` leaves the mode to the question text (instruction tasks say it in words)."""
    suffix = "" if thinking is None else (" /think" if thinking else " /no_think")
    return {"role": "user", "content": question + suffix}


def assemble_response(reasoning: str, answer: str) -> str:
    if reasoning:
        return f"{THINK_OPEN}\n{reasoning}\n{THINK_CLOSE}\n\n{answer}"
    return f"{THINK_OPEN}\n\n{THINK_CLOSE}\n\n{answer}"


def conversation(question: str, response: str, thinking: bool | None) -> list[dict]:
    return [user_turn(question, thinking), {"role": "assistant", "content": response}]


@dataclass(frozen=True)
class ParsedResponse:
    reasoning: str | None   # None when there is no complete think block
    answer: str             # text after the last </think>, or the whole response without one
    think_blocks: int       # number of <think> openings
    closed: bool            # a </think> exists

    @property
    def empty_think(self) -> bool:
        return self.closed and self.think_blocks == 1 and not (self.reasoning or "").strip()


_THINK_RE = re.compile(re.escape(THINK_OPEN) + r"(.*?)" + re.escape(THINK_CLOSE), re.S)


def parse_response(text: str) -> ParsedResponse:
    text = text.replace(IM_END, "")
    opens = text.count(THINK_OPEN)
    if THINK_CLOSE not in text:
        return ParsedResponse(None, text.strip(), opens, False)
    head, _, answer = text.rpartition(THINK_CLOSE)
    match = _THINK_RE.search(text)
    reasoning = match.group(1).strip() if match else head.replace(THINK_OPEN, "").strip()
    return ParsedResponse(reasoning, answer.strip(), opens, True)
