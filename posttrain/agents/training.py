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

from posttrain.agents.environments import Budget, environment_class, episode_class, tools_of


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


def shown_tools(row: dict) -> list | None:
    """The tools a row's conversation is rendered with: its own schemas (`tools`), or its
    environment's tools as RL and evaluation show them (the same functions, the same schema)."""
    if row.get("tools"):
        return row["tools"]
    if row.get("environment"):
        session = episode_class(row["environment"])
        return [getattr(session, name) for name in tools_of(session)]
    return None


def environment_versions(rows: list[dict]) -> dict[str, str]:
    """What a stage records (and keys its cache on) for the environments its rows use."""
    return {f"environment/{name}": environment_class(name).version for name in tool_environments(rows)}


def environment_versions_in(paths) -> dict[str, str]:
    """The versions of the environments the rows of these JSONL files name: the stage and evaluation
    cache keys read them, so a user's environment with a new `version` reruns what ran in it."""
    import json
    from pathlib import Path

    rows = []
    for path in paths:
        if not Path(path).is_file():
            continue
        with open(path, encoding="utf-8") as lines:
            rows += [row for line in lines if '"environment"' in line
                     and isinstance(row := json.loads(line), dict) and row.get("kind") == "tool"]
    return environment_versions(rows)


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


class TrajectoryLog:
    """Every tool episode a stage's reward judges, one JSON line each: the training step, the row, the
    canonical transcript, the environment's own record (its version, every call with its result,
    its final state) and what the episode was paid. The stage tracks the file as a dataset of the
    run (DVC); `posttrain replay` re-runs its episodes against the environment."""

    def __init__(self, path):
        from pathlib import Path

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.episodes = 0

    def start(self, resumed_step: int | None) -> None:
        """A fresh log, or on a resume the episodes of the steps the checkpoint holds (a step after it
        is generated again, so its earlier episodes are dropped)."""
        import json

        kept = []
        if resumed_step is not None and self.path.is_file():
            kept = [line for line in self.path.read_text(encoding="utf-8").splitlines()
                    if line.strip() and (json.loads(line).get("step") or 0) < resumed_step]
        self.path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        self.episodes = len(kept)

    def watch(self, reward):
        """`reward` (the tool reward as TRL calls it) with each tool episode it scores written down."""
        import json

        from posttrain.rewards import completion_text

        def recorded(completions, environments=None, task=None, trainer_state=None, **kwargs):
            scores = reward(completions, environments=environments, task=task, trainer_state=trainer_state, **kwargs)
            with self.path.open("a", encoding="utf-8") as out:
                for i, score in enumerate(scores):
                    session = environments[i] if environments else None
                    if score is None or session is None or not hasattr(session, "_record"):
                        continue
                    row = json.loads(task[i]) if task is not None else {}
                    out.write(json.dumps({"step": getattr(trainer_state, "global_step", None), "row": row,
                                          "transcript": completion_text(completions[i]),
                                          "episode": session._record(), "score": score}, ensure_ascii=False) + "\n")
                    self.episodes += 1
            return scores

        recorded.__name__ = reward.__name__
        return recorded


class StageTools:
    """What an RL stage adds for its tool rows, built once from the rows: TRL's environment factories,
    the tokenizer's tool-call parser, the episode log the tool reward writes, and the environment
    versions the stage records. Inert (no factories, nothing logged) for a stage without tool rows."""

    def __init__(self, rows: list[dict], tokenizer, work, where: str):
        from pathlib import Path

        self.factories = environment_factories(rows)
        self.versions = environment_versions(rows)
        self.log = None
        if self.factories:
            enable_tool_parsing(tokenizer, where)
            self.log = TrajectoryLog(Path(work) / "trajectories.jsonl")

    def rewards(self, reward_funcs: list) -> list:
        """The stage's rewards with the tool reward's episodes written down."""
        return [self.log.watch(f) if self.log and f.__name__ == "tool" else f for f in reward_funcs]

    def start(self, checkpoint_dir) -> None:
        from pathlib import Path

        if self.log:
            self.log.start(int(Path(checkpoint_dir).name.rsplit("-", 1)[1]) if checkpoint_dir else None)

    def produced(self, inputs, stage: str) -> list:
        """The episodes as a dataset of the run (DVC-tracked, in its lineage)."""
        from pathlib import Path

        from posttrain.data.store import store_for

        if not self.log or not self.log.path.exists():
            return []
        return [store_for(inputs).track(self.log.path, name=f"{Path(inputs.work_dir).parent.name}/{stage}_trajectories.jsonl",
                                        rows=self.log.episodes)]
