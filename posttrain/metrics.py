"""The one metric table: which metrics an evaluation suite produces, their labels, and which way
is better. Evaluation, gates, the report card and promotion all read it.

A metric's full name is `<suite>/<metric>` (e.g. `math/accuracy`, `no_think/mode_compliance`);
which metrics a suite has follows from its task kind and mode. `accuracy_<language>` exists for
every language found in a suite's data.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str                      # the part after "<suite>/"
    label: str
    higher_is_better: bool | None  # None: descriptive only (lengths), never gated
    paired: bool                   # has one value per suite item, so two checkpoints compare item by item
    kinds: tuple[str, ...] = ("math", "instruction", "code", "direct", "open", "tool")
    modes: tuple[str, ...] = ("think", "no_think", "row")


# IFEval's own four accuracies (posttrain.rewards.ifeval_reference: the benchmark's checks, no guard
# layer; loose = its loose reading of a reply), beside `accuracy` (what training pays), on suites
# whose rows all keep their IFEval ids: (level, reading) -> metric name.
IFEVAL_ACCURACIES = {(level, reading): f"ifeval_{level}_{reading}"
                     for level in ("prompt", "instruction") for reading in ("strict", "loose")}

METRICS: tuple[Metric, ...] = (
    Metric("accuracy", "accuracy", True, True),
    Metric("format", "format (one boxed answer, mode's think block)", True, True, kinds=("math",)),
    Metric("mode_compliance", "mode switch followed (empty think block)", True, True, modes=("no_think",)),
    Metric("language_consistency", "language consistency of the reasoning", True, True, kinds=("math",),
           modes=("think", "row")),
    Metric("mixed_language", "mixed-language reasoning rate", False, False, kinds=("math",), modes=("think", "row")),
    Metric("truncation", "truncated at the token budget", False, True),
    # Replies whose constraints held but that the guard layer refused (generic, off-topic, hedged...):
    # what instruction accuracy would be without the guards, read against it; described, never gated.
    Metric("guard_overrides", "constraints met, refused by a guard", None, False, kinds=("instruction",)),
    *(Metric(name, f"IFEval {level}-level {reading} accuracy (the benchmark's own checks)", True, level == "prompt",
             kinds=("instruction",)) for (level, reading), name in IFEVAL_ACCURACIES.items()),
    Metric("reward_model", "the reward model's mean raw score (what training pays; never gated)", None, False,
           kinds=("open",)),
    # tool-use episodes: what the agent did (descriptive), and why episodes failed (`failed_<reason>`)
    Metric("tool_calls", "tool calls per episode", None, False, kinds=("tool",)),
    Metric("tool_errors", "share of tool calls answered with an error", None, False, kinds=("tool",)),
    Metric("len_correct", "tokens, correct answers", None, False, kinds=("math",)),
    Metric("len_wrong", "tokens, wrong answers", None, False, kinds=("math",)),
)
BY_NAME = {m.name: m for m in METRICS}
PER_LANGUAGE = "accuracy_"   # accuracy_<language>: accuracy on that language's items
FAILED = "failed_"           # failed_<reason>: the share of a tool suite's episodes that failed for that reason


def suite_metrics(kind: str, mode: str) -> list[Metric]:
    return [m for m in METRICS if kind in m.kinds and mode in m.modes]


def lookup(full_name: str) -> Metric | None:
    """The table entry of `<suite>/<metric>` (per-language accuracy resolves to accuracy)."""
    _, _, name = full_name.rpartition("/")
    if name.startswith(PER_LANGUAGE):
        return Metric(name, f"accuracy, {name.removeprefix(PER_LANGUAGE)}", True, False)
    if name.startswith(FAILED):
        return Metric(name, f"episodes failed: {name.removeprefix(FAILED)}", None, False, kinds=("tool",))
    return BY_NAME.get(name)


def higher_is_better(full_name: str) -> bool | None:
    metric = lookup(full_name)
    return metric.higher_is_better if metric else None
