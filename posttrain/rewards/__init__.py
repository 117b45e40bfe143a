"""What "correct" means for each task kind, and the rewards the RL stages train on: two tables.

`TASKS` is the one definition of correct per task kind. Evaluation, both RL stages (their task
rewards), rejection sampling, distillation's verified-only filter and `posttrain verify` all call
`verify_row`, which reads it; a truncated reply is wrong everywhere.

`REWARDS` lists every reward a stage can weight: its builder, its version and the task kinds it
scores (a task reward pays exactly `verify_row`'s verdict for the kinds `TASKS` gives it; shaping
rewards, format, mode, language, length, add to it). Each is a plain function over a batch, in the
shape TRL's GRPOTrainer calls reward functions: `completions` plus every dataset column, one float
per completion, or None where it does not apply (TRL leaves that component out of the row's sum).
"""
from __future__ import annotations

import unicodedata
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from posttrain.chat import THINK_CLOSE, THINK_OPEN, ChatConfig, parse_response, to_canonical
from posttrain.rewards.format import FORMAT_VERSION, format_ok, mode_ok, substantive
from posttrain.rewards.code_judge import extract_code, run_tests, tests_of
from posttrain.rewards.code_sandbox import SANDBOX_VERSION
from posttrain.rewards.judge import JUDGE_VERSION, make_judge_reward
from posttrain.rewards.model_based import REWARD_MODEL_VERSION, make_reward_model_reward
from posttrain.rewards.instruction import INSTRUCTION_VERSION
from posttrain.rewards.instruction_text import tokens
from posttrain.rewards.instruction_guard import instruction_verdict
from posttrain.rewards.language import LANGUAGE_VERSION, language_share
from posttrain.rewards.length import LENGTH_VERSION, OVERLONG_VERSION, make_length_reward, make_overlong_reward
from posttrain.rewards.math import MATH_VERIFIER_VERSION, verify_math

from posttrain.agents.environments import ENVIRONMENTS
from posttrain.agents.episodes import TOOL_VERSION, render_transcript

RewardFn = Callable[..., list[float | None]]
# the tool kind's verdict and the built-in environments it replays episodes in
TOOL_KIND_VERSION = "+".join([TOOL_VERSION, *(cls.version for _, cls in sorted(ENVIRONMENTS.items()))])
DIRECT_VERSION = "direct/2"   # direct_match
OPEN_VERSION = "open/1"       # the independent check of an open-ended row: its constraints and answer
TASK_REWARD_VERSION = "task/1"   # verify_row as a training reward: truncated replies score 0


def completion_text(completion) -> str:
    """The whole reply as text. A conversational completion is TRL's parsed messages: one assistant
    message (its `reasoning_content` put back in its think block, where the chat template's response
    parser took it out), or a tool-use episode, written as its canonical transcript."""
    if isinstance(completion, list):
        messages = [m for m in completion if isinstance(m, dict)]
        if any(m.get("role") == "tool" or m.get("tool_calls") for m in messages):
            return render_transcript(messages)
        return "".join((f"{THINK_OPEN}\n{m['reasoning_content']}\n{THINK_CLOSE}\n\n" if m.get("reasoning_content") else "")
                       + (m.get("content") or "") for m in messages)
    return completion if isinstance(completion, str) else ""


def prompt_text(prompt) -> str | None:
    """The words a prompt puts to the model (a chat's user and system turns, or a plain string)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "\n".join(m.get("content") or "" for m in prompt
                         if isinstance(m, dict) and m.get("role") != "assistant" and isinstance(m.get("content"), str))
    return None


def _column(kwargs: dict, name: str, n: int, default=None) -> list:
    return kwargs.get(name) or [default] * n


def _normalised_answer(text: str, keep_case: bool = False) -> str:
    text = unicodedata.normalize("NFKC", text).strip().rstrip(".。!！").strip()
    return text if keep_case else text.casefold()


def _case_marked(reference: str) -> bool:
    """A reference whose case is part of the answer ("STONE", "iPhone"): neither lower case nor
    capitalised words ("paris", "Paris", "New York"), whose case a reply may change."""
    text = unicodedata.normalize("NFKC", reference)
    return text != text.lower() and not all(word[:1].upper() + word[1:].lower() == word for word in text.split())


def direct_match(response: str, reference: str) -> float:
    """A `direct` task: the reply after the think block equals the reference answer, up to Unicode
    width, a final full stop and case, unless the reference's case is part of it (`_case_marked`:
    "Write stone in capital letters" wants STONE, not stone)."""
    if not isinstance(response, str) or not isinstance(reference, str):
        return 0.0
    keep_case = _case_marked(reference)
    answer = _normalised_answer(parse_response(response).answer, keep_case)
    return float(bool(answer) and answer == _normalised_answer(reference, keep_case))


def on_whole_replies(fn: RewardFn, chat: ChatConfig) -> RewardFn:
    """`fn` scored on whole replies in canonical think markers: TRL hands over the generated part
    only, without what the chat template pre-filled (the `prefill` column, e.g. Qwen3's empty think
    block when thinking is off)."""
    def reward(completions, prefill=None, **kwargs):
        prefill = prefill or [""] * len(completions)
        return fn([to_canonical(p + completion_text(c), chat) for p, c in zip(prefill, completions)], **kwargs)

    reward.__name__ = fn.__name__
    return reward


def _modes(kwargs: dict, n: int) -> list[bool | None]:
    """Each row's mode as its prompt was rendered (`posttrain.chat.rendered_mode`, the `thinking`
    column of `grpo_dataset`): None where the prompt carries no mode. A missing column is no mode,
    never "not thinking"."""
    return kwargs["thinking"] if kwargs.get("thinking") is not None else [None] * n


def _questions(kwargs: dict, n: int) -> list[str | None]:
    """Each row's question (the prompt's words), for `substantive`: the question copied into the
    think block is no reasoning. From GRPO's `task` column, as evaluation reads it from the row."""
    task = kwargs.get("task")
    if task is None:
        return [None] * n
    return [prompt_text((json.loads(t) if isinstance(t, str) else t).get("prompt")) for t in task]


def format_reward(completions, **kwargs) -> list[float | None]:
    n = len(completions)
    kinds = _column(kwargs, "kind", n, "math")
    return [float(format_ok(completion_text(c), t, q)) if k == "math" else None
            for c, k, t, q in zip(completions, kinds, _modes(kwargs, n), _questions(kwargs, n))]


def mode(completions, **kwargs) -> list[float | None]:
    """The /think vs /no_think switch on every row whose prompt was rendered in a mode, whatever its
    answer format (format_reward also demands a boxed answer, so it cannot score instruction rows:
    JSON, a word, a sentence...); None where the prompt asked for no mode."""
    n = len(completions)
    return [None if t is None else float(mode_ok(completion_text(c), t, q))
            for c, t, q in zip(completions, _modes(kwargs, n), _questions(kwargs, n))]


def language_consistency(completions, language, questions: list | None = None, **kwargs) -> list[float | None]:
    """The share of the reasoning's words in the prompt's language; 0 for a reply that reasons
    but never answers (nothing after `</think>` but markup: an empty `\\boxed{}` earns nothing),
    and for reasoning without content (one character, one repeated word, the question copied:
    `substantive`). `questions`: each row's question where known (evaluation passes it; training
    reads it from the `task` column)."""
    questions = questions if questions is not None else _questions(kwargs, len(completions))
    out: list[float | None] = []
    for c, lang, q in zip(completions, language, questions):
        parsed = parse_response(completion_text(c))
        share = language_share(parsed.reasoning, lang) if parsed.reasoning else None
        out.append(0.0 if share is not None and (not tokens(parsed.answer) or not substantive(parsed.reasoning, q))
                   else share)
    return out


# ---- what "correct" means, per task kind -------------------------------------------------------

# The fields of a data row that a task's verdict reads: a GRPO row carries them as one JSON column
# (`task`), so training judges the very row evaluation judges.
TASK_FIELDS = ("kind", "answer", "constraints", "tests", "prompt", "environment", "setup", "expected_state", "answer_kind")


@dataclass(frozen=True)
class TaskKind:
    verify: Callable[[str, dict], tuple[float, str]]   # (whole reply, row) -> (score in [0, 1], reason)
    version: str
    reward: str   # the name of the training reward (in REWARDS) that pays this kind's verdict
    also: tuple[str, ...] = ()   # other rewards that may pay the kind instead (model-based ones)

    @property
    def rewards(self) -> tuple[str, ...]:
        return (self.reward, *self.also)


def _verify_math(response: str, row: dict) -> tuple[float, str]:
    verdict = verify_math(response, row["answer"], prompt_text(row.get("prompt")))
    return verdict.reward, verdict.reason


def _verify_direct(response: str, row: dict) -> tuple[float, str]:
    score = direct_match(response, row["answer"])
    return score, "match" if score else "mismatch"


def _verify_instruction(response: str, row: dict) -> tuple[float, str]:
    """The checkers, then the guards on top (`instruction_guard`): `constraints_met`,
    `constraints_failed`, or `guard:<name>` where the constraints held and a guard refused the reply
    (generic, off-topic, wrong or hedged answer, ...), so overrides can be counted."""
    return instruction_verdict(response, row.get("constraints"), reference=row.get("answer"),
                               prompt=prompt_text(row.get("prompt")))


def _verify_code(response: str, row: dict) -> tuple[float, str]:
    cases = tests_of(row.get("tests"))
    if not cases:
        return 0.0, "no_tests"
    code = extract_code(response)
    if not code:
        return 0.0, "no_code"
    verdict = run_tests(code, cases)
    return verdict.reward, "tests_passed" if verdict.reward == 1 else verdict.reason or "tests_failed"


def unguarded_code_rows(rows: list[dict]) -> str | None:
    """What a stage's alerts and `data check` say about code rows whose tests are all shown (none held
    out, `code_judge.has_hidden_tests`): a policy can special-case the shown tests there and be paid."""
    from posttrain.rewards.code_judge import has_hidden_tests

    code = [r for r in rows if r.get("kind") == "code"]
    shown = sum(not has_hidden_tests(r.get("tests")) for r in code)
    return (f"{shown} of {len(code)} code rows hold no test out (none marked hidden: true): the reward cannot tell a "
            "program that special-cases the shown tests from one that solves them") if shown else None


def _verify_open(response: str, row: dict) -> tuple[float, str]:
    """An open-ended row: training pays a reward model (posttrain.rewards.model_based); evaluation's
    independent check is the row's constraints and answer, as an instruction row's."""
    if not row.get("constraints"):
        return 0.0, "no_check"
    return _verify_instruction(response, row)


def _verify_tool(response: str, row: dict) -> tuple[float, str]:
    """A tool-use episode (its canonical transcript, posttrain.agents.episodes): its calls replayed
    in a fresh environment, then the environment's final state and the final reply checked; the
    reply is judged as a row of the row's `answer_kind` (`direct` by default)."""
    from posttrain.agents.episodes import episode_of_transcript, judge_episode

    if row.get("answer_kind", "direct") in ("tool", "open"):
        return 0.0, "bad_answer_kind"
    return judge_episode(row, episode_of_transcript(response, row), verify_row)


TASKS: dict[str, TaskKind] = {
    "math": TaskKind(_verify_math, MATH_VERIFIER_VERSION, reward="correctness"),
    "direct": TaskKind(_verify_direct, DIRECT_VERSION, reward="correctness"),
    "instruction": TaskKind(_verify_instruction, INSTRUCTION_VERSION, reward="instruction"),
    "code": TaskKind(_verify_code, SANDBOX_VERSION, reward="code"),
    "open": TaskKind(_verify_open, f"{OPEN_VERSION}+{INSTRUCTION_VERSION}", reward="reward_model", also=("judge",)),
    "tool": TaskKind(_verify_tool, TOOL_KIND_VERSION, reward="tool"),
}
TASK_KINDS: tuple[str, ...] = tuple(TASKS)


def verify_row(response: str, row: dict, *, truncated: bool = False) -> tuple[float, str]:
    """(score in [0, 1], reason) of a whole reply to a prompt row, by the row's task kind (`TASKS`):
    what evaluation counts as correct, the RL stages' task rewards pay, rejection sampling keeps and
    distillation trusts. A reply cut off at the token budget never ended: it is wrong, whatever it
    said before the cut. Never raises: a verifier that fails scores 0 with the reason."""
    if truncated:
        return 0.0, "truncated"
    task = TASKS.get(row.get("kind", "math"))
    if task is None or not isinstance(response, str):
        return 0.0, "unknown_kind" if task is None else "not_text"
    try:
        return task.verify(response, row)
    except Exception as exc:   # noqa: BLE001 - a reward never raises into the trainer
        return 0.0, f"verifier_error:{type(exc).__name__}"


def task_json(row: dict) -> str:
    """The `task` column of a GRPO row: the fields `verify_row` reads, as evaluation has them."""
    return json.dumps({k: row[k] for k in TASK_FIELDS if k in row}, ensure_ascii=False)


def task_rows(completions, task, columns: dict) -> list[dict]:
    """The rows `verify_row` judges: GRPO's `task` column (`task_json`), or, called outside a trainer
    with plain columns, rows made of `kind` / `answer` / `constraints` / `tests` / `prompts`."""
    if task is not None:
        return [json.loads(t) if isinstance(t, str) else t for t in task]
    n = len(completions)
    names = {"kind": "kind", "answer": "answer", "constraints": "constraints", "tests": "tests", "prompts": "prompt"}
    rows = [{"kind": "math"} for _ in range(n)]
    for column, key in names.items():
        for row, value in zip(rows, columns.get(column) or [None] * n):
            if value is not None:
                row[key] = value
    return rows


def truncated_flags(completion_ids, stop_ids: frozenset[int] | None, n: int) -> list[bool]:
    """Which completions hit the token budget: the last token is none of generation's stop tokens
    (eos and the template's end of turn: `posttrain.generation.engines._stop_ids`), as evaluation decides.
    Without token ids (outside a trainer) nothing is known to be cut."""
    if completion_ids is None or stop_ids is None:
        return [False] * n
    return [not ids or ids[-1] not in stop_ids for ids in completion_ids]


def kinds_paid_by(reward: str) -> frozenset[str]:
    return frozenset(kind for kind, task in TASKS.items() if reward in task.rewards)


def verify_batch(responses: list[str], rows: list[dict], truncated: list[bool]) -> list[tuple[float, str]]:
    """`verify_row` over a batch; code rows run concurrently (each judged program mostly waits)."""
    if not any(row.get("kind") == "code" for row in rows) or len(rows) == 1:
        return [verify_row(r, row, truncated=t) for r, row, t in zip(responses, rows, truncated)]
    with ThreadPoolExecutor(max_workers=max(1, min(4, len(rows)))) as pool:
        return list(pool.map(lambda args: verify_row(args[0], args[1], truncated=args[2]),
                             zip(responses, rows, truncated)))


@dataclass(frozen=True)
class RewardSettings:
    """Run settings some rewards need: group size and length warm-up (Kimi length reward), the
    generation budget (DAPO overlong), the ids that end a completion (truncation: generation's stop ids)."""

    num_generations: int = 8
    length_warmup_steps: int = 0
    max_completion_length: int = 128
    overlong_cache: int = 32
    stop_ids: frozenset[int] | None = None
    reward_model: Any = None                   # a posttrain.rewards.reward_model.RewardModelScorer
    judge: Any = None                          # a posttrain.rewards.judge.Judge
    reward_model_length_debias: bool = False


def make_task_reward(name: str, settings: RewardSettings) -> RewardFn:
    """The training reward `name`: `verify_row`'s verdict on each row of a kind TASKS gives it
    (None on the other rows), truncated replies 0. `reward.verdicts` gives the (score, reason)
    pairs, for the sampler's statistics and the evaluation-disagreement monitor."""
    kinds = kinds_paid_by(name)

    def verdicts(completions, answer=None, *, task=None, completion_ids=None, **columns) -> list[tuple[float, str] | None]:
        rows = task_rows(completions, task, {**columns, "answer": answer})
        cut = truncated_flags(completion_ids, settings.stop_ids, len(completions))
        todo = [i for i, row in enumerate(rows) if row.get("kind", "math") in kinds]
        found = verify_batch([completion_text(completions[i]) for i in todo], [rows[i] for i in todo],
                             [cut[i] for i in todo])
        out: list[tuple[float, str] | None] = [None] * len(completions)
        for i, verdict in zip(todo, found):
            out[i] = verdict
        return out

    def reward(completions, answer=None, **kwargs) -> list[float | None]:
        return [None if v is None else v[0] for v in verdicts(completions, answer, **kwargs)]

    reward.__name__ = name
    reward.verdicts = verdicts
    reward.kinds = kinds
    return reward


@dataclass(frozen=True)
class Reward:
    build: Callable[[RewardSettings], RewardFn]
    version: str
    kinds: frozenset[str] | None = field(default=None)   # the task kinds it pays; None: a shaping reward


def _task_reward(name: str) -> Reward:
    kinds = kinds_paid_by(name)
    version = "+".join([TASK_REWARD_VERSION, *(TASKS[k].version for k in sorted(kinds))])
    return Reward(lambda settings: make_task_reward(name, settings), version, kinds)


# Rewards computed by a model rather than a verdict: they score rows of the kinds they pay, and no
# verdict statistic or evaluation-disagreement check applies to them.
MODEL_REWARDS: dict[str, Reward] = {
    "reward_model": Reward(make_reward_model_reward, REWARD_MODEL_VERSION, kinds_paid_by("reward_model")),
    "judge": Reward(make_judge_reward, JUDGE_VERSION, kinds_paid_by("judge")),
}
REWARDS: dict[str, Reward] = {
    **{name: _task_reward(name) for name in dict.fromkeys(task.reward for task in TASKS.values())
       if name not in MODEL_REWARDS},
    **MODEL_REWARDS,
    "format": Reward(lambda _: format_reward, FORMAT_VERSION),
    "mode": Reward(lambda _: mode, FORMAT_VERSION),
    "language_consistency": Reward(lambda _: language_consistency, LANGUAGE_VERSION),
    "length": Reward(lambda s: make_length_reward(s.num_generations, s.length_warmup_steps, s.stop_ids), LENGTH_VERSION),
    "overlong": Reward(lambda s: make_overlong_reward(s.max_completion_length, s.overlong_cache), OVERLONG_VERSION),
}

# What a stage's cache key and report record: every verdict's and reward's version.
VERIFIER_VERSIONS = {**{kind: task.version for kind, task in TASKS.items()},
                     **{f"reward/{name}": reward.version for name, reward in REWARDS.items()}}


class MissingTaskReward(ValueError):
    pass


def check_task_rewards(weights: dict[str, float], kinds: dict[str, int], where: str) -> None:
    """Refuse a stage whose data has rows of a kind that no weighted reward pays (they would train
    on shaping rewards alone: the mode reward pays a non-answer). `kinds`: rows per kind."""
    for kind, count in sorted(kinds.items()):
        task = TASKS.get(kind)
        if task is None:
            raise MissingTaskReward(f"{where}: {count} rows of task kind {kind!r}, which has no verifier "
                                    f"(known kinds: {', '.join(TASKS)})")
        if not any(weights.get(name) for name in task.rewards):
            named = " or ".join(f"rewards.{name}" for name in task.rewards)
            raise MissingTaskReward(f"{where}: {count} rows of kind {kind!r} and no weighted reward pays them: "
                                    f"set {named} > 0 (it is {weights.get(task.reward, 0)})")


def build_rewards(weights: dict[str, float], settings: RewardSettings | None = None) -> tuple[list[RewardFn], list[float]]:
    """Reward functions with a non-zero weight, and their weights, in a stable order; TRL names each
    function by its `__name__`."""
    unknown = set(weights) - set(REWARDS)
    if unknown:
        raise ValueError(f"unknown rewards {sorted(unknown)}; known: {', '.join(REWARDS)}")
    settings = settings or RewardSettings()
    chosen = [(name, w) for name, w in weights.items() if w != 0]
    return [REWARDS[name].build(settings) for name, _ in chosen], [w for _, w in chosen]




# The task rewards with default settings, for calling outside a trainer (no truncation known).
correctness = make_task_reward("correctness", RewardSettings())
instruction = make_task_reward("instruction", RewardSettings())
code = make_task_reward("code", RewardSettings())
