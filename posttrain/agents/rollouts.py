"""Evaluation's tool-use episodes: the loop TRL's GRPOTrainer runs in training (generate a turn, parse
its calls with the tokenizer's response parser, run them on the row's environment, append the
results as the chat template renders a tool turn, generate again), over posttrain.generation for
held-out suites, where TRL has no loop outside its trainer. Its parts are TRL's and training's: the
same parser (`trl.chat_template_utils.parse_response`), the same budgeted sessions
(posttrain.agents.environments), the same whole-episode token budget (TRL's max_completion_length
counts the tool turns too) and turn limit (`Budget.max_calls`), and the same canonical transcript
the `tool` verdict replays (`render_transcript`)."""
from __future__ import annotations

import json

from posttrain.agents.environments import Budget, episode_class, tools_of
from posttrain.agents.episodes import render_transcript, setup_of
from posttrain.chat import with_switch


def tool_suffix(tokenizer, tool_messages: list[dict]) -> str:
    """The text the chat template puts between an assistant turn's end-of-turn token and the next
    assistant turn, for these tool results (TRL's `_get_tool_suffix_ids`, as text)."""
    call = [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]
    dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": call}]
    prefix = tokenizer.apply_chat_template(dummy, tokenize=False)
    full = tokenizer.apply_chat_template(dummy + tool_messages, tokenize=False, add_generation_prompt=True)
    eos = tokenizer.eos_token or ""
    prefix = prefix[:prefix.rfind(eos) + len(eos)] if eos and eos in prefix else prefix
    if not full.startswith(prefix):
        raise ValueError("the chat template does not preserve prefixes around a tool turn")
    return full[len(prefix):]


def run_episodes(model, tokenizer, chat, requests: list[tuple[dict, bool | None]], *, max_new_tokens: int,
                 batch_size: int, budget: Budget = Budget(), desc: str = "tool episodes"):
    """One greedy episode per (tool row, mode): a `Generation` whose text is the episode's canonical
    transcript, its tokens the whole episode's (tool turns included), truncated when the token
    budget ran out mid-turn."""
    from trl.chat_template_utils import parse_response

    from posttrain.agents.training import enable_tool_parsing
    from posttrain.generation.engines import Generation, generate

    enable_tool_parsing(tokenizer, "the evaluated model")
    sessions, prompts, messages = [], [], []
    for row, thinking in requests:
        session = episode_class(row["environment"], budget)()
        session.reset(setup=json.dumps(setup_of(row)))
        tools = [getattr(session, name) for name in tools_of(type(session))]
        prompts.append(tokenizer.apply_chat_template(with_switch(row["prompt"], chat, thinking), tools=tools or None,
                                                     tokenize=False, add_generation_prompt=True))
        sessions.append(session)
        messages.append([])
    texts, spent = list(prompts), [0] * len(requests)
    truncated, active = [False] * len(requests), list(range(len(requests)))
    eos = tokenizer.eos_token or ""
    for turn in range(budget.max_calls + 1):
        if not active:
            break
        outputs = generate(model, tokenizer, [texts[i] for i in active], batch_size=batch_size,
                           max_new_tokens=max(1, max_new_tokens - min(spent[i] for i in active)),
                           desc=f"{desc} (turn {turn + 1})")
        still = []
        for i, (g,) in zip(active, outputs):
            room = max_new_tokens - spent[i]
            ids = tokenizer(g.text, add_special_tokens=False)["input_ids"][:room]
            text = tokenizer.decode(ids)
            cut = g.truncated or len(ids) < g.num_tokens - (0 if g.truncated else 1)
            spent[i] += len(ids) + (0 if cut else 1)
            prefix = tokenizer(texts[i], add_special_tokens=False)["input_ids"]
            message = parse_response(tokenizer, ids + ([] if cut else [tokenizer.eos_token_id]), prefix=prefix,
                                     tools=[getattr(sessions[i], n) for n in tools_of(type(sessions[i]))])
            messages[i].append(message)
            if cut:
                truncated[i] = True
                continue
            calls = message.get("tool_calls") or []
            if not calls or turn == budget.max_calls:
                continue
            results = []
            for c in calls:
                function = c.get("function") or {}
                name, arguments = function.get("name", ""), function.get("arguments") or {}
                tool = getattr(sessions[i], name, None) if name and not name.startswith("_") and name != "reset" else None
                result = tool(**arguments) if callable(tool) and isinstance(arguments, dict) \
                    else f"error: unknown_tool: {name!r}"
                results.append({"role": "tool", "name": name or "unknown", "content": result})
            messages[i] += results
            suffix = tool_suffix(tokenizer, results)
            spent[i] += len(tokenizer(suffix, add_special_tokens=False)["input_ids"])
            if spent[i] >= max_new_tokens:
                truncated[i] = True
                continue
            texts[i] += text + eos + suffix
            still.append(i)
        active = still
    return [[Generation(text=render_transcript(m), num_tokens=n, truncated=t, thinking=thinking)]
            for m, n, t, (_, thinking) in zip(messages, spent, truncated, requests)]
