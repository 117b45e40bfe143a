"""The one place that knows the conversation layout: chat template, mode switch, response shape.

Responses follow Qwen3: `<think>\\n{reasoning}\\n</think>\\n\\n{answer}`; the non-thinking form keeps
an empty think block. How the mode is asked for depends on the model family (`ChatConfig`): a
`/think` / `/no_think` suffix on the user turn (the embedded world, Qwen3's soft switch), a chat
template argument (Qwen3's `enable_thinking`), or a system prompt. Inside posttrain a response
always uses the canonical markers `<think>` / `</think>`; a model family with other markers is
translated at the boundary (`to_canonical` / `from_canonical`).
"""
from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
PAD, DOC_END, UNK = "<|pad|>", "<|endoftext|>", "<|unk|>"
TOOL_MARKERS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")

# ChatML with {% generation %} markers so TRL's assistant_only_loss masks everything but replies, and
# tool calls in Qwen3's layout: the tools listed in a system turn (by name and parameters: the world's
# model reads characters, so the JSON schema Qwen3 lists would be hundreds of tokens a prompt), each
# call `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` inside the assistant's turn, and
# the tools' results `<tool_response>\n...\n</tool_response>` in one user turn after it. A
# conversation without tools renders as plain ChatML.
CHAT_TEMPLATE = (
    "{%- if tools -%}"
    "{{ '<|im_start|>system\\nTools:' }}"
    "{%- for tool in tools -%}{%- set f = tool.function if tool.function is defined else tool -%}"
    "{{ ' ' + f.name + '(' + (f.parameters.properties | list | join(', ') if f.parameters is defined and f.parameters.properties is defined else '') + ')' }}"
    "{%- endfor -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' }}{% generation %}{{ message['content'] or '' }}"
    "{%- for call in message.get('tool_calls') or [] -%}{%- set f = call.function if call.function is defined else call -%}"
    "{{ '\\n' if (loop.first and message['content']) or not loop.first else '' }}"
    "{{ '<tool_call>\\n{\"name\": \"' + f.name + '\", \"arguments\": ' + (f.arguments if f.arguments is string else f.arguments | tojson) + '}\\n</tool_call>' }}"
    "{%- endfor -%}"
    "{{ '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{%- elif message['role'] == 'tool' -%}"
    "{{ '<|im_start|>user' if loop.first or messages[loop.index0 - 1]['role'] != 'tool' else '' }}"
    "{{ '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{{ '<|im_end|>\\n' if loop.last or messages[loop.index0 + 1]['role'] != 'tool' else '' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


class ChatConfig(BaseModel):
    """How a model family is spoken to. The defaults fit the embedded world and Qwen3's soft switch."""

    model_config = ConfigDict(extra="forbid")

    template: str | None = None   # Jinja chat template for a tokenizer without one (base models)
    thinking_switch: Literal["suffix", "template_kwarg", "system_prompt", "none"] = "suffix"
    think_suffix: str = " /think"
    no_think_suffix: str = " /no_think"
    template_kwarg: str = "enable_thinking"
    think_system_prompt: str = ""
    no_think_system_prompt: str = ""
    think_open: str = THINK_OPEN
    think_close: str = THINK_CLOSE
    add_think_tokens: bool = False   # add missing markers to the vocabulary (resizes the embeddings)
    # inserted before think_close when a thinking budget cuts the think block (Qwen3 tech report sec. 4.3)
    stop_thinking: str = ("Considering the limited time by the user, I have to give the solution based on the "
                          "thinking directly now.")


DEFAULT_CHAT = ChatConfig()


def with_switch(turns: list[dict], chat: ChatConfig, thinking: bool | None) -> list[dict]:
    """The conversation with the mode switch applied the way the model family reads it."""
    turns = [dict(t) for t in turns]
    if thinking is None or chat.thinking_switch in ("none", "template_kwarg"):
        return turns
    if chat.thinking_switch == "suffix":
        last_user = max(i for i, t in enumerate(turns) if t["role"] == "user")
        turns[last_user]["content"] += chat.think_suffix if thinking else chat.no_think_suffix
        return turns
    prompt = chat.think_system_prompt if thinking else chat.no_think_system_prompt
    if turns and turns[0]["role"] == "system":
        turns[0]["content"] = (prompt + "\n\n" + turns[0]["content"]).strip()
    elif prompt:
        turns.insert(0, {"role": "system", "content": prompt})
    return turns


def _template_kwargs(chat: ChatConfig, thinking: bool | None) -> dict:
    return {chat.template_kwarg: thinking} if chat.thinking_switch == "template_kwarg" and thinking is not None else {}


def render_prompt(tokenizer, chat: ChatConfig, turns: list[dict], thinking: bool | None) -> tuple[str, str]:
    """(prompt text, prefill). The prefill is the part of the generation prompt that belongs to the
    reply: Qwen3's template pre-fills an empty think block when thinking is off, and the reply is
    only whole (and checkable for its mode) with it put back in front."""
    turns = with_switch(turns, chat, thinking)
    text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True,
                                         **_template_kwargs(chat, thinking))
    start = text.rfind(chat.think_open)
    after_question = text.rfind(turns[-1]["content"]) + len(turns[-1]["content"])
    prefill = text[start:] if start >= after_question else ""
    return text, prefill


def as_trl_prompt(tokenizer, text: str) -> str:
    """A rendered prompt as GRPOTrainer takes it. TRL tokenizes text prompts with the tokenizer's
    special tokens, so a chat template that writes BOS itself would give it twice; the special tokens
    the tokenizer puts in front come off the text where it already starts with them, and TRL's ids
    are then the ids every other part of posttrain reads (`add_special_tokens=False`)."""
    plain = tokenizer(text, add_special_tokens=False)["input_ids"]
    full = tokenizer(text)["input_ids"]
    added = len(full) - len(plain)
    if added <= 0 or full[added:] != plain:
        return text
    prefix = tokenizer.decode(full[:added])
    if text.startswith(prefix) and tokenizer(text[len(prefix):])["input_ids"] == plain:
        return text[len(prefix):]
    return text


def rendered_mode(tokenizer, chat: ChatConfig, turns: list[dict], thinking: bool | None) -> bool | None:
    """The mode a prompt is rendered in, which is the mode its reply is judged in: the row's own
    where the family's switch renders it; for a row without one (`thinking` missing), whatever its
    rendering equals (Qwen3's template thinks by default: True); None where the rendering asks for
    no mode (a bare question under the suffix switch, any prompt under `thinking_switch: none`).
    Never a missing value read as "not thinking"."""
    think = render_prompt(tokenizer, chat, turns, True)[0]
    no_think = render_prompt(tokenizer, chat, turns, False)[0]
    if think == no_think:
        return None
    if thinking is not None:
        return thinking
    plain = render_prompt(tokenizer, chat, turns, None)[0]
    return True if plain == think else False if plain == no_think else None


def sft_example(tokenizer, chat: ChatConfig, messages: list[dict], thinking: bool | None, tools: list | None = None) -> dict:
    """Token ids of one conversation and its completion mask (1 on the final assistant reply and its
    end-of-turn marker, 0 elsewhere), for any chat template: no `{% generation %}` markers needed.
    A tool-use trajectory (tool calls, tool turns, `tools` shown) trains on every assistant turn."""
    if tools or any(m.get("tool_calls") or m["role"] == "tool" for m in messages):
        return _trajectory_example(tokenizer, chat, messages, thinking, tools)
    *history, reply = messages
    reply = {"role": "assistant", "content": from_canonical(reply["content"], chat)}
    prompt, prefill = render_prompt(tokenizer, chat, history, thinking)
    full = tokenizer.apply_chat_template(with_switch(history, chat, thinking) + [reply], tokenize=False,
                                         **_template_kwargs(chat, thinking))
    if full.startswith(prompt):
        # Whitespace after the end-of-turn marker is never generated (decoding stops at it).
        completion = full[len(prompt):].rstrip("\n")
    else:
        text = reply["content"]
        if prefill and text.startswith(prefill.rstrip()):
            text = text[len(prefill.rstrip()):].lstrip()
        completion = text + (tokenizer.eos_token or "")
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
    return {"input_ids": prompt_ids + completion_ids,
            "completion_mask": [0] * len(prompt_ids) + [1] * len(completion_ids)}


def _trajectory_example(tokenizer, chat: ChatConfig, messages: list[dict], thinking: bool | None, tools) -> dict:
    """Every assistant turn (its text, calls and end-of-turn marker) trained; the prompt and the tool
    turns masked. Tokenized piece by piece as TRL's tool loop builds an episode: a turn as generated,
    then the tool turn's tokens appended, so the training tokens are the rollout's."""
    conversation = [{**m, "content": from_canonical(m["content"], chat)} if m["role"] == "assistant" else m
                    for m in with_switch(messages, chat, thinking)]
    kwargs = {"tools": tools or None, **_template_kwargs(chat, thinking)}
    ids: list[int] = []
    mask: list[int] = []
    done = ""
    for j, message in enumerate(conversation):
        if message["role"] != "assistant":
            continue
        prompt = tokenizer.apply_chat_template(conversation[:j], tokenize=False, add_generation_prompt=True, **kwargs)
        full = tokenizer.apply_chat_template(conversation[:j + 1], tokenize=False, **kwargs)
        if not prompt.startswith(done) or not full.startswith(prompt):
            raise ValueError("the chat template does not render a tool conversation turn by turn (a later turn "
                             "changes an earlier one's text), so its assistant turns cannot be masked")
        reply = full[len(prompt):].rstrip("\n")
        context_ids = tokenizer(prompt[len(done):], add_special_tokens=False)["input_ids"]
        reply_ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
        ids += context_ids + reply_ids
        mask += [0] * len(context_ids) + [1] * len(reply_ids)
        done = prompt + reply
    return {"input_ids": ids, "completion_mask": mask}


def to_canonical(text: str, chat: ChatConfig) -> str:
    if chat.think_open != THINK_OPEN or chat.think_close != THINK_CLOSE:
        text = text.replace(chat.think_open, THINK_OPEN).replace(chat.think_close, THINK_CLOSE)
    return text


def from_canonical(text: str, chat: ChatConfig) -> str:
    if chat.think_open != THINK_OPEN or chat.think_close != THINK_CLOSE:
        text = text.replace(THINK_OPEN, chat.think_open).replace(THINK_CLOSE, chat.think_close)
    return text


def user_turn(question: str, thinking: bool | None) -> dict:
    """`thinking=None` leaves the mode to the question text (instruction tasks say it in words)."""
    suffix = "" if thinking is None else (" /think" if thinking else " /no_think")
    return {"role": "user", "content": question + suffix}


def assemble_response(reasoning: str, answer: str) -> str:
    if reasoning:
        return f"{THINK_OPEN}\n{reasoning}\n{THINK_CLOSE}\n\n{answer}"
    return f"{THINK_OPEN}\n\n{THINK_CLOSE}\n\n{answer}"


def without_thinking(reply: str) -> str:
    """A thinking-mode reply's answer after an empty think block: the same reply in `/no_think` form."""
    return assemble_response("", parse_response(reply).answer)


def conversation(question: str, response: str, thinking: bool | None) -> list[dict]:
    return [user_turn(question, thinking), {"role": "assistant", "content": response}]


@dataclass(frozen=True)
class ParsedResponse:
    reasoning: str | None   # None when there is no complete think block
    answer: str             # text after the first </think>, or the whole response without one
    think_blocks: int       # number of <think> openings
    closes: int             # number of </think> markers: a well-formed reply has exactly one

    @property
    def closed(self) -> bool:
        """A </think> exists."""
        return self.closes > 0

    @property
    def empty_think(self) -> bool:
        return self.think_blocks == 1 and self.closes == 1 and not visible(self.reasoning or "")


def visible(text: str) -> bool:
    """Whether the text shows anything: not only whitespace and invisible format characters
    (zero-width spaces and joiners, direction marks)."""
    return any(not ch.isspace() and unicodedata.category(ch) != "Cf" for ch in text)


# A think marker however it is dressed: `<thinking>`, `< /think >`, `＜think＞` (NFKC), `<\u200bthink>`
# (invisible characters dropped), `&lt;think&gt;` (HTML-unescaped), `<THINK>` (case-folded).
_THINK_LIKE = re.compile(r"<\s*/?\s*think(?:ing)?\b[^<>]{0,200}>")


def has_think_marker(text: str) -> bool:
    """Whether text holds a think-like marker: the answer part of a reply that has one reasons
    outside its think block (a /no_think reply's reasoning after the empty block, in look-alike
    markers). Linear time."""
    text = unicodedata.normalize("NFKC", html.unescape(text))
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf").casefold()
    return "think" in text and _THINK_LIKE.search(text) is not None


def parse_response(text: str) -> ParsedResponse:
    """The reply split as a reasoning parser serves it (vLLM's Qwen3 and DeepSeek-R1 parsers): the
    answer is everything after the FIRST </think>, so a second </think> stays in the answer where
    every check sees it (nothing can be hidden before it). Linear time in the length of the reply."""
    text = text.replace(IM_END, "")
    opens, closes = text.count(THINK_OPEN), text.count(THINK_CLOSE)
    if not closes:
        return ParsedResponse(None, text.strip(), opens, 0)
    head, _, answer = text.partition(THINK_CLOSE)
    start = head.find(THINK_OPEN)
    reasoning = head[start + len(THINK_OPEN):] if start >= 0 else head
    return ParsedResponse(reasoning.strip(), answer.strip(), opens, closes)


def turn_end_id(tokenizer) -> int | None:
    """The token the chat template closes an assistant turn with (`<|im_end|>`, Llama 3's
    `<|eot_id|>`), when it is one special or added token: a model fine-tuned on these replies ends
    them with it, so generation must stop there even when the tokenizer's eos is another token."""
    marker = "Q7xZ"
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "q"}, {"role": "assistant", "content": marker}],
                                             tokenize=False)
    except Exception:   # a template that cannot render a plain exchange: check_model reports it before any work
        return None
    tail = text[text.rfind(marker) + len(marker):] if marker in text else ""
    ids = tokenizer(tail.lstrip(" "), add_special_tokens=False)["input_ids"] if tail.strip() else []
    specials = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    return ids[0] if ids and ids[0] in specials else None


def check_template(tokenizer, chat: ChatConfig, where: str) -> None:
    """Refuse a chat template that would train or sample silently wrong: one that ignores
    `add_generation_prompt` (the assistant header would be trained as part of every reply), or one
    on which the configured mode switch changes nothing (/think and /no_think would be the same
    prompt). `where` names the model in the message."""
    turns = [{"role": "user", "content": "What is 2 + 2?"}]
    plain = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=False)
    if tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True) == plain:
        raise ValueError(f"{where}: its chat template ignores add_generation_prompt (the prompt does not open the "
                         "assistant's turn), so every trained reply would include the turn header: use a template "
                         "that renders the assistant header when add_generation_prompt is true (base.chat.template)")
    if chat.thinking_switch != "none" and \
            render_prompt(tokenizer, chat, turns, True)[0] == render_prompt(tokenizer, chat, turns, False)[0]:
        how = {"template_kwarg": f"the template never reads {chat.template_kwarg!r}",
               "system_prompt": "the template drops system messages, or think_system_prompt and "
                                "no_think_system_prompt are equal",
               "suffix": "think_suffix and no_think_suffix are equal"}[chat.thinking_switch]
        raise ValueError(f"{where}: base.chat.thinking_switch {chat.thinking_switch!r} renders /think and /no_think "
                         f"prompts identically ({how}): the mode switch would not reach the model; set "
                         "base.chat.thinking_switch to one the template honours, or 'none'")
