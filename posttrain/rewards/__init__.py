"""Reward registry: plain functions over a batch, in the shape TRL's GRPOTrainer calls them.

Each function receives `completions` plus every dataset column (`answer`, `kind`, `language`,
`thinking`, `constraints`) and returns one float per completion, or None where it does not apply
(TRL then leaves that component out of the sum for that row).
"""
from __future__ import annotations

import unicodedata
from typing import Callable

from posttrain.chat import ChatConfig, parse_response, to_canonical
from posttrain.rewards.format import FORMAT_VERSION, format_ok, mode_ok
from posttrain.rewards.code_judge import code_execution
from posttrain.rewards.code_sandbox import SANDBOX_VERSION
from posttrain.rewards.instruction import INSTRUCTION_VERSION, instruction_score, tokens
from posttrain.rewards.language import LANGUAGE_VERSION, language_share
from posttrain.rewards.length import LENGTH_VERSION, OVERLONG_VERSION, make_length_reward, make_overlong_reward
from posttrain.rewards.math import MATH_VERIFIER_VERSION, verify_math

RewardFn = Callable[..., list[float | None]]
DIRECT_VERSION = "direct/2"   # direct_match


def completion_text(completion) -> str:
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        return "".join(m.get("content") or "" for m in completion if isinstance(m, dict))
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


def correctness(completions, answer, **kwargs) -> list[float | None]:
    """Verified against the gold answer, by task kind: math (the math verifier, told the prompt so
    that restating the question is not an answer) or direct (normalised match); other kinds have
    their own rewards."""
    n = len(completions)
    kinds, prompts = _column(kwargs, "kind", n, "math"), _column(kwargs, "prompts", n, None)
    checks = {"math": lambda c, a, p: verify_math(c, a, prompt_text(p)).reward, "direct": lambda c, a, p: direct_match(c, a)}
    return [checks[k](completion_text(c), a, p) if k in checks else None
            for c, a, k, p in zip(completions, answer, kinds, prompts)]


def on_whole_replies(fn: RewardFn, chat: ChatConfig) -> RewardFn:
    """`fn` scored on whole replies in canonical think markers: TRL hands over the generated part
    only, without what the chat template pre-filled (the `prefill` column, e.g. Qwen3's empty think
    block when thinking is off)."""
    def reward(completions, prefill=None, **kwargs):
        prefill = prefill or [""] * len(completions)
        return fn([to_canonical(p + completion_text(c), chat) for p, c in zip(prefill, completions)], **kwargs)

    reward.__name__ = fn.__name__
    return reward


def format_reward(completions, **kwargs) -> list[float | None]:
    n = len(completions)
    kinds, thinking = _column(kwargs, "kind", n, "math"), _column(kwargs, "thinking", n, True)
    return [float(format_ok(completion_text(c), bool(t))) if k == "math" else None
            for c, k, t in zip(completions, kinds, thinking)]


def mode(completions, **kwargs) -> list[float | None]:
    """The /think vs /no_think switch on every row, whatever its answer format (format_reward also
    demands a boxed answer, so it cannot score instruction rows: JSON, a word, a sentence...)."""
    thinking = _column(kwargs, "thinking", len(completions), True)
    return [float(mode_ok(completion_text(c), bool(t))) for c, t in zip(completions, thinking)]


def language_consistency(completions, language, **kwargs) -> list[float | None]:
    """The share of the reasoning's words in the prompt's language; 0 for a reply that reasons
    but never answers (nothing after `</think>` but markup: an empty `\\boxed{}` earns nothing)."""
    out: list[float | None] = []
    for c, lang in zip(completions, language):
        parsed = parse_response(completion_text(c))
        share = language_share(parsed.reasoning, lang) if parsed.reasoning else None
        out.append(0.0 if share is not None and not tokens(parsed.answer) else share)
    return out


def instruction(completions, **kwargs) -> list[float | None]:
    """A malformed constraint value scores 0 (data loaders reject it first: parse_constraints); the
    row's `answer`, where there is one, tells the degeneracy check whether the task asks for a number."""
    n = len(completions)
    constraints = _column(kwargs, "constraints", n, None)
    answers = _column(kwargs, "answer", n, None)
    return [None if not cons else instruction_score(completion_text(c), cons, reference=a)
            for c, cons, a in zip(completions, constraints, answers)]


def verify_row(response: str, row: dict) -> tuple[float, str]:
    """(score in [0, 1], reason) of a whole reply to a prompt row, by the row's task kind: what
    rejection sampling keeps, distillation trusts and evaluation counts as correct."""
    kind = row.get("kind", "math")
    if kind == "math":
        verdict = verify_math(response, row["answer"], prompt_text(row.get("prompt")))
        return verdict.reward, verdict.reason
    if kind == "direct":
        score = direct_match(response, row["answer"])
        return score, "match" if score else "mismatch"
    if kind == "instruction":
        score = instruction_score(response, row["constraints"], reference=row.get("answer"))
        return score, "constraints_met" if score == 1 else "constraints_failed"
    result = code_execution([response], [row["tests"]])[0]
    return (result or 0.0), "tests_passed" if result == 1 else "tests_failed"


REWARDS: dict[str, RewardFn] = {
    "correctness": correctness,
    "format": format_reward,
    "mode": mode,
    "language_consistency": language_consistency,
    "instruction": instruction,
    "code": code_execution,
}

# Rewards that need run settings (group size, warm-up, length budget): built per run by build_rewards.
REWARD_FACTORIES: dict[str, Callable[..., RewardFn]] = {
    "length": lambda *, num_generations, length_warmup_steps, **_: make_length_reward(
        num_generations, length_warmup_steps),
    "overlong": lambda *, max_completion_length, overlong_cache, **_: make_overlong_reward(
        max_completion_length, overlong_cache),
}

VERIFIER_VERSIONS = {
    "math": MATH_VERIFIER_VERSION,
    "direct": DIRECT_VERSION,
    "format": FORMAT_VERSION,
    "mode": FORMAT_VERSION,
    "language": LANGUAGE_VERSION,
    "instruction": INSTRUCTION_VERSION,
    "length": LENGTH_VERSION,
    "overlong": OVERLONG_VERSION,
    "code": SANDBOX_VERSION,
}


def build_rewards(weights: dict[str, float], *, num_generations: int = 8, length_warmup_steps: int = 0,
                  max_completion_length: int = 128, overlong_cache: int = 32) -> tuple[list[RewardFn], list[float]]:
    """Reward functions with a non-zero weight, and their weights, in a stable order.

    The keyword settings only feed the factory-built rewards ("length": Kimi group size and warm-up,
    "overlong": DAPO L_max and L_cache); TRL names each function by its `__name__`."""
    known = [*REWARDS, *REWARD_FACTORIES]
    unknown = set(weights) - set(known)
    if unknown:
        raise ValueError(f"unknown rewards {sorted(unknown)}; known: {', '.join(known)}")
    settings = dict(num_generations=num_generations, length_warmup_steps=length_warmup_steps,
                    max_completion_length=max_completion_length, overlong_cache=overlong_cache)
    chosen = [(name, w) for name, w in weights.items() if w != 0]
    funcs = []
    for name, _ in chosen:
        fn = REWARDS[name] if name in REWARDS else REWARD_FACTORIES[name](**settings)
        funcs.append(fn)
    return funcs, [w for _, w in chosen]
