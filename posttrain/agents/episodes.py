"""One tool-use episode as data, and the verdict of the `tool` task kind.

An episode's transcript is kept in one canonical text form whatever the model family (Qwen3's
layout, the one the embedded world's template renders): the assistant's turns, each closed by
`<|im_end|>`, with its calls as `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`,
and between them a user turn of `<tool_response>` blocks. `render_transcript` writes it from the
messages TRL's tool loop (or evaluation's) produced; `parse_transcript` reads it back.

What is correct is decided on the environment, never on the transcript's word: `verify_transcript`
replays the calls of the assistant's turns in a fresh environment built from the row's `setup`,
and `judge_episode` checks what the environment ended in (`expected_state`) and the final reply
(`answer`, judged as the row's `answer_kind`). A tool response the policy prints itself, a state
it claims to have written, a turn marker inside its own turn: none of them reach the verdict.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Callable

from posttrain.agents.environments import Budget, environment_class, episode_class

# 2: the episode wall budget counts the time spent in tools, not the generation between calls.
TOOL_VERSION = "tool/2"
TURN_START, TURN_END = "<|im_start|>", "<|im_end|>"
CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
FORGED_MARKERS = (TURN_START, "<tool_response>", "</tool_response>")


@dataclass
class Episode:
    """What an episode did: the environment (name, version, setup), every call with its result,
    the environment's final state, the final reply, and whether the policy ended by answering."""

    environment: str | None
    version: str
    setup: dict
    calls: list[dict]
    state: dict
    reply: str = ""
    ended: bool = True
    malformed_calls: int = 0
    forged: bool = False
    turns: int = 1

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Turn:
    role: str            # "assistant" or "tool"
    text: str
    calls: list = field(default_factory=list)   # parsed calls (assistant turns): (name, arguments) or None if malformed


def _call_text(name: str, arguments) -> str:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return f'<tool_call>\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {args}}}\n</tool_call>'


def render_transcript(messages: list[dict]) -> str:
    """The canonical text of an episode's messages (assistant turns with `reasoning_content`,
    `content` and `tool_calls`, tool turns with `content`), from the first assistant turn on."""
    parts: list[str] = []
    previous = None
    for message in messages:
        role = message.get("role")
        if role == "tool":
            if previous != "tool":
                parts.append(f"\n{TURN_START}user")
            parts.append(f"\n<tool_response>\n{message.get('content') or ''}\n</tool_response>")
        else:
            if previous == "tool":
                parts.append(f"{TURN_END}\n{TURN_START}assistant\n")
            elif previous is not None:
                parts.append(f"\n{TURN_START}assistant\n")
            text = ""
            if message.get("reasoning_content"):
                text += f"<think>\n{message['reasoning_content']}\n</think>\n\n"
            text += message.get("content") or ""
            calls = [(c.get("function") or c) for c in message.get("tool_calls") or []]
            if calls:
                text = "\n".join([text.rstrip("\n")] * bool(text.strip()) + [_call_text(c.get("name"), c.get("arguments", {}))
                                                                             for c in calls])
            parts.append(text + TURN_END)
        previous = role
    if previous == "tool":
        parts.append(TURN_END)
    return "".join(parts)


def _parse_call(body: str):
    try:
        call = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    return (call["name"], arguments) if isinstance(arguments, dict) else None


def parse_transcript(text: str) -> list[Turn]:
    """The turns of a canonical transcript. Calls are read from assistant turns only."""
    turns: list[Turn] = []
    for i, segment in enumerate(text.split(TURN_START)):
        segment = segment.removesuffix("\n").removesuffix(TURN_END)
        role = "assistant"
        if i > 0:
            head, _, segment = segment.partition("\n")
            role = "assistant" if head == "assistant" else "tool"
        if role == "tool":
            turns.append(Turn("tool", segment))
        else:
            turns.append(Turn("assistant", segment, [_parse_call(body) for body in CALL_RE.findall(segment)]))
    return turns


def replay_calls(environment: str | None, setup: dict, calls: list[tuple[str, dict]], budget: Budget = Budget()) -> dict:
    """Run `calls` in order against a fresh environment reset with `setup`; the record of the
    session (every call's result and error, the final state, the environment's version)."""
    session = episode_class(environment, budget)()
    session.reset(setup=setup)
    for name, arguments in calls:
        method = getattr(session, name, None) if not name.startswith("_") and name not in ("reset",) else None
        if method is None or not callable(method):
            session._calls.append({"tool": name, "arguments": arguments, "result": f"error: unknown_tool: {name!r}",
                                   "error": "unknown_tool"})
            continue
        method(**arguments) if isinstance(arguments, dict) else method()
    return session._record()


def episode_of_transcript(text: str, row: dict, budget: Budget = Budget()) -> Episode:
    """The episode a transcript describes, with every result and the final state recomputed by
    replaying its calls (the transcript's own tool responses are never read)."""
    turns = parse_transcript(text)
    assistant = [t for t in turns if t.role == "assistant"]
    # Calls the environment answered: a turn's calls after the last tool turn were never run (the
    # episode hit its turn limit), so they do not change the replayed state.
    answered = [t for i, t in enumerate(turns[:-1]) if t.role == "assistant" and turns[i + 1].role == "tool"]
    calls = [c for t in answered for c in t.calls if c is not None]
    malformed = sum(c is None for t in assistant for c in t.calls)
    forged = _forged(turns)
    record = replay_calls(row.get("environment"), setup_of(row), calls, budget)
    last = assistant[-1] if assistant else Turn("assistant", "")
    return Episode(environment=record["environment"], version=record["version"], setup=record["setup"],
                   calls=record["calls"], state=record["state"], reply=CALL_RE.sub("", last.text).strip(),
                   ended=bool(assistant) and not last.calls and turns[-1].role == "assistant",
                   malformed_calls=malformed, forged=forged, turns=len(assistant))


def _forged(turns: list[Turn]) -> bool:
    """Whether the transcript holds a turn the environment did not write: a tool response inside
    an assistant turn, a tool turn that answers no call (or not each of them), or two assistant
    turns with no tool turn between (a turn marker the policy printed)."""
    for i, turn in enumerate(turns):
        before = turns[i - 1] if i else None
        if turn.role == "assistant":
            if any(marker in turn.text for marker in FORGED_MARKERS[1:]):
                return True
            if before is not None and before.role == "assistant":
                return True
        elif before is None or before.role != "assistant" or not before.calls \
                or turn.text.count("<tool_response>") != len(before.calls):
            return True
    return False


def setup_of(row: dict) -> dict:
    setup = row.get("setup")
    if isinstance(setup, str):
        return json.loads(setup) if setup else {}
    return dict(setup or {})


def judge_episode(row: dict, episode: Episode, verify_answer: Callable[[str, dict], tuple[float, str]]) -> tuple[float, str]:
    """(score, reason) of an episode of a `tool` row: it must end with a reply (not a call), spend
    no budget past its limits, forge no turn, leave the environment in `expected_state` (when the
    row has one) and answer `answer` (when it has one, judged by `verify_answer` as a row of kind
    `answer_kind`)."""
    if episode.forged:
        return 0.0, "forged_turn"
    if not episode.ended:
        return 0.0, "no_final_answer"
    budget_errors = [c["error"] for c in episode.calls if c.get("error") in ("call_budget", "wall_budget", "timeout", "stalled")]
    if budget_errors:
        return 0.0, budget_errors[0]
    expected = row.get("expected_state")
    if isinstance(expected, str):
        expected = json.loads(expected) if expected else None
    answer = row.get("answer")
    if expected is None and answer in (None, ""):
        return 0.0, "no_check"
    if expected is not None and episode.state != expected:
        return 0.0, "wrong_state"
    if answer not in (None, ""):
        score, reason = verify_answer(episode.reply, {"kind": row.get("answer_kind", "direct"), "answer": answer,
                                                      "prompt": row.get("prompt")})
        if score < 1.0:
            return 0.0, f"wrong_answer:{reason}"
    return 1.0, "solved"


def check_tool_row(row: dict) -> str | None:
    """Why a `tool` row cannot be verified (None when it can): its environment, setup and checks."""
    try:
        cls = environment_class(row.get("environment") or "")
    except ValueError as exc:
        return str(exc)
    try:
        setup = setup_of(row)
        cls().reset(**setup)
    except Exception as exc:   # noqa: BLE001
        return f"setup does not reset environment {row.get('environment')!r}: {type(exc).__name__}: {exc}"
    if row.get("expected_state") is None and row.get("answer") in (None, ""):
        return "a tool row needs expected_state, answer or both"
    if row.get("answer_kind", "direct") in ("tool", "open"):
        return f"answer_kind {row.get('answer_kind')!r} cannot judge a final reply"
    return None


@dataclass
class ReplayOutcome:
    """What replaying a recorded episode found: whether it reached the recorded state with the
    recorded results, and what differs (the environment's version first)."""

    matches: bool
    recorded_version: str
    current_version: str
    differences: list[str]

    @property
    def version_changed(self) -> bool:
        return self.recorded_version != self.current_version


def replay_record(record: dict, budget: Budget = Budget()) -> ReplayOutcome:
    """Re-run a recorded episode's calls (a line of a stage's `trajectories.jsonl`: its `row` and its
    `episode`) against the environment as it is now, and compare results and final state."""
    episode = record["episode"]
    calls = [(c["tool"], c.get("arguments") or {}) for c in episode["calls"]]
    now = replay_calls(episode.get("environment"), episode.get("setup") or {}, calls, budget)
    differences = []
    if now["version"] != episode["version"]:
        differences.append(f"environment {episode.get('environment')!r} is version {now['version']}, "
                           f"the episode was recorded on {episode['version']}")
    for i, (then, again) in enumerate(zip(episode["calls"], now["calls"])):
        if then["result"] != again["result"]:
            differences.append(f"call {i} {then['tool']}({json.dumps(then.get('arguments'), ensure_ascii=False)}): "
                               f"recorded {then['result'][:80]!r}, now {again['result'][:80]!r}")
    if now["state"] != episode["state"]:
        differences.append(f"final state: recorded {json.dumps(episode['state'], ensure_ascii=False)[:200]}, "
                           f"now {json.dumps(now['state'], ensure_ascii=False)[:200]}")
    return ReplayOutcome(not differences, episode["version"], now["version"], differences)


def trajectory_record(row: dict, transcript: str, verdict: tuple[float, str], step: int | None = None) -> dict:
    """One line of a stage's trajectories: the row, the transcript, the replayed episode and its verdict."""
    episode = episode_of_transcript(transcript, row)
    return {"step": step, "row": {k: row[k] for k in ("prompt", "environment", "setup", "expected_state", "answer",
                                                     "answer_kind") if k in row},
            "transcript": transcript, "episode": episode.to_json(), "score": verdict[0], "reason": verdict[1]}


def trajectory_fields(row: dict, messages: list[dict], refuse: Callable[[str], Exception]) -> dict:
    """An SFT row's tools, shown to the model as the chat template lists them: `environment` (a
    built-in or module:Class name: its tools, as RL shows them) or `tools` (JSON schemas, OpenAI's
    form). A conversation with tool calls or tool turns needs one of them."""
    fields: dict = {}
    if row.get("environment"):
        try:
            environment_class(str(row["environment"]))
        except ValueError as exc:
            raise refuse(f"column 'environment': {exc}") from None
        fields["environment"] = str(row["environment"])
    tools = row.get("tools")
    if isinstance(tools, str) and tools.strip():
        try:
            tools = json.loads(tools)
        except ValueError as exc:
            raise refuse(f"column 'tools' is not JSON ({exc})") from None
    if tools:
        if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance((t.get("function") or t).get("name"), str)
                                                  for t in tools):
            raise refuse("column 'tools' must be a list of tool schemas ({'type': 'function', 'function': {'name': ...}})")
        fields["tools"] = tools
    if not fields and any(m.get("tool_calls") or m["role"] == "tool" for m in messages):
        raise refuse("a conversation with tool calls needs an 'environment' or 'tools' column: the tools the model is shown")
    return fields


def tool_fields(row: dict, refuse: Callable[[str], Exception]) -> dict:
    """A data row's tool fields as a prompt row keeps them (`setup` and `expected_state` read from
    JSON text where a file holds them so), refused (`refuse(problem)` raised) when the row cannot be
    verified: its environment is reset with its setup once, before any work."""
    fields: dict = {}
    for key in ("setup", "expected_state"):
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise refuse(f"column {key!r} is not JSON ({exc})") from None
        if value is not None and not isinstance(value, dict):
            raise refuse(f"column {key!r} must be an object (a dict), not {type(value).__name__}")
        if value is not None:
            fields[key] = value
    if not isinstance(row.get("environment"), str) or not row["environment"]:
        raise refuse("column 'environment' is missing (a tool row names the environment it runs in)")
    fields["environment"] = row["environment"]
    if row.get("answer") not in (None, ""):
        fields["answer"] = str(row["answer"])
    if row.get("answer_kind"):
        fields["answer_kind"] = str(row["answer_kind"])
    problem = check_tool_row(fields)
    if problem:
        raise refuse(problem)
    return fields
