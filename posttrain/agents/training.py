"""Tool-use episodes in TRL's GRPOTrainer, through its own multi-turn loop (`environment_factory`):
one factory per environment the stage's rows name (and one without tools for the other rows), the
tokenizer's response parser for the family's tool-call layout, and the turn limit from the budget.

TRL's loop generates a turn, parses its calls with the tokenizer's `response_template`, runs them
on the row's environment (posttrain.agents.environments.ToolSession: budgeted and recorded), appends
the results as the chat template renders a tool turn, and generates again; the tool turns' tokens
are masked out of the loss (its `tool_mask`). The reward then judges the episode's transcript
(`posttrain.rewards.completion_text` -> the `tool` task kind).
"""
from __future__ import annotations

from posttrain.agents.environments import Budget, environment_class, episode_class


def tool_environments(rows: list[dict]) -> list[str]:
    """The environments a stage's tool rows name, in a stable order."""
    return sorted({r["environment"] for r in rows if r.get("kind") == "tool"})


def environment_factories(rows: list[dict], budget: Budget = Budget()) -> dict | None:
    """TRL's `environment_factory` for these rows (None when no row uses a tool): each example picks
    its factory by its `environment` column, None for rows without tools."""
    names = tool_environments(rows)
    if not names:
        return None
    for name in names:
        environment_class(name)   # a clear error before any work: unknown or malformed environment
    return {None: episode_class(None, budget), **{name: episode_class(name, budget) for name in names}}


def environment_versions(rows: list[dict]) -> dict[str, str]:
    """What a stage records (and keys its cache on) for the environments its rows use."""
    return {f"environment/{name}": environment_class(name).version for name in tool_environments(rows)}


def enable_tool_parsing(tokenizer, where: str) -> None:
    """Give the tokenizer the parser TRL reads tool calls with: TRL's own for the families it knows,
    Qwen3's for the embedded world's template (which renders Qwen3's tool layout). Refuses a
    template that cannot render a tool conversation, or one whose calls nothing can parse."""
    from trl.chat_template_utils import add_response_schema, qwen3_template, supports_tool_calling

    from posttrain.chat import CHAT_TEMPLATE

    if not supports_tool_calling(tokenizer):
        raise ValueError(f"{where}: its chat template cannot render a tool conversation (assistant tool_calls, "
                         "tool turns): tool rows need a template that does (base.chat.template)")
    if getattr(tokenizer, "response_template", None) is not None or getattr(tokenizer, "response_schema", None) is not None:
        return
    if tokenizer.chat_template == CHAT_TEMPLATE:
        tokenizer.response_template = qwen3_template
        return
    try:
        add_response_schema(tokenizer)
    except ValueError:
        raise ValueError(f"{where}: no parser for its tool calls: the tokenizer has no response_template and TRL "
                         "knows no parser for its chat template; save one with the tokenizer "
                         "(transformers' response parsing)") from None
