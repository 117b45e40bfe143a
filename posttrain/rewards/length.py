"""Length shaping for reasoning RL: the Kimi k1.5 length reward and DAPO's soft overlong punishment.

Both are factories returning TRL-shaped reward functions (`fn(completions, **columns) -> list`),
because each needs settings (group size, warm-up, length budget) that TRL's call does not carry.

How TRL 1.16 calls them (trl/trainer/grpo_trainer.py):
- `_get_train_sampler` builds a `RepeatSampler(mini_repeat_count=num_generations, ...)`
  (trl/trainer/utils.py, `RepeatSampler.__iter__`): every prompt index is yielded `num_generations`
  times in a row, so the k generations of one prompt sit consecutively in the generation batch.
- `_generate_and_score_completions` calls `_calculate_rewards(inputs, prompts, completions,
  completion_ids_list)` on that batch *before* `shuffle_sequence_dict` reorders it in
  `_prepare_inputs`, and later groups rewards with `rewards.view(-1, num_generations)`, which
  assumes the same consecutive layout.
- `_calculate_rewards` passes `completion_ids=completion_ids_list` (token ids per completion) and
  `reward_kwargs["trainer_state"] = self.state` (a transformers `TrainerState`; the optimiser step
  is `trainer_state.global_step`).
Caveat: the rewards are computed per process and gathered afterwards; with several processes a
prompt group can straddle two processes (see the GPU 0 / GPU 1 figure in `_get_train_sampler`).
This pipeline trains in one process, where every batch is a whole number of groups. A trailing
partial chunk is scored as a group of its own rather than failing.
"""
from __future__ import annotations

from posttrain.rewards.format import thinks_honestly
from posttrain.rewards.math import verify_math

# Kimi k1.5 length reward; a reply with no answer gets its floor; correct is verify_row's verdict
# (truncated: wrong) with the prompt's mode kept (no bonus for a degenerate think block)
LENGTH_VERSION = "length/4"   # substantive reasoning (format/4) against the prompt; generation's stop ids
OVERLONG_VERSION = "overlong/1"  # DAPO soft overlong punishment
NO_ANSWER = -0.5   # Kimi's lowest value: what the longest wrong answer of a group gets


def kimi_length_rewards(lengths: list[int], correct: list[bool]) -> list[float]:
    """Kimi k1.5 (arXiv:2501.12599, sec. 2.3.3) for ONE prompt group of k samples:
    λ_i = 0.5 − (len_i − min_len)/(max_len − min_len); a correct answer gets λ, a wrong one
    min(0, λ), so a short wrong answer is never rewarded for being short. All lengths equal → 0."""
    if len(lengths) != len(correct):
        raise ValueError(f"{len(lengths)} lengths but {len(correct)} correctness flags")
    if not lengths:
        return []
    lo, hi = min(lengths), max(lengths)
    if hi == lo:
        return [0.0] * len(lengths)
    lams = [0.5 - (n - lo) / (hi - lo) for n in lengths]
    return [lam if ok else min(0.0, lam) for lam, ok in zip(lams, correct)]


def dapo_overlong_penalty(length: int, max_length: int, cache_length: int) -> float:
    """DAPO (arXiv:2503.14476) eq. 13, soft overlong punishment: free up to L_max − L_cache, then a
    linear ramp down to −1 at L_max, and −1 beyond it."""
    if cache_length <= 0 or cache_length > max_length:
        raise ValueError(f"overlong cache {cache_length} must be in 1..max_length ({max_length})")
    free = max_length - cache_length
    if length <= free:
        return 0.0
    if length <= max_length:
        return (free - length) / cache_length
    return -1.0


def _texts(completions) -> list[str]:
    from posttrain.rewards import completion_text

    return [completion_text(c) for c in completions]


def _lengths(texts: list[str], completion_ids) -> list[int]:
    """Tokens when TRL passes `completion_ids` (what the length budget is counted in), else characters."""
    if completion_ids is not None and len(completion_ids) == len(texts):
        return [len(ids) for ids in completion_ids]
    return [len(t) for t in texts]


def _kinds(kwargs: dict, n: int) -> list:
    return kwargs.get("kind") or ["math"] * n


def _step(trainer_state) -> int | None:
    return getattr(trainer_state, "global_step", None) if trainer_state is not None else None


def make_length_reward(num_generations: int, warmup_steps: int = 0, stop_ids: frozenset[int] | None = None):
    """The Kimi length reward over consecutive groups of `num_generations` completions.

    0 for every math row while `trainer_state.global_step < warmup_steps` (Kimi warms up with plain
    policy optimisation first, since penalising length early slows learning); outside a trainer
    (no `trainer_state`) there is no step to wait for and the reward applies. Non-math rows → None.
    """
    if num_generations < 1:
        raise ValueError(f"num_generations must be >= 1, got {num_generations}")
    if warmup_steps < 0:
        raise ValueError(f"length warm-up must be >= 0 steps, got {warmup_steps}")

    def length(completions, answer=None, completion_ids=None, trainer_state=None, **kwargs) -> list[float | None]:
        n = len(completions)
        kinds = _kinds(kwargs, n)
        is_math = [k == "math" for k in kinds]
        step = _step(trainer_state)
        if step is not None and step < warmup_steps:
            return [0.0 if m else None for m in is_math]
        texts = _texts(completions)
        lengths = _lengths(texts, completion_ids)
        from posttrain.rewards import prompt_text, task_rows, truncated_flags, verify_row

        rows = task_rows(completions, kwargs.pop("task", None), {**kwargs, "answer": answer})
        modes = kwargs.get("thinking") or [None] * n
        cut = truncated_flags(completion_ids, stop_ids, n)
        out: list[float | None] = [None] * n
        for start in range(0, n, num_generations):
            idx = [i for i in range(start, min(start + num_generations, n)) if is_math[i]]
            # Correct as evaluation judges it (verify_row: truncated is wrong), and in thinking mode
            # only with reasoning that has content: a short reply's bonus is for thinking less, not
            # for a one-character think block.
            # The prompt, where the row has it, so the question copied as reasoning earns no bonus.
            correct = [verify_row(texts[i], rows[i], truncated=cut[i])[0] == 1.0
                       and thinks_honestly(texts[i], modes[i], prompt_text(rows[i].get("prompt"))) for i in idx]
            for i, r in zip(idx, kimi_length_rewards([lengths[i] for i in idx], correct)):
                # A reply with no answer at all is not a short honest attempt: the floor, not 0.
                answered = verify_math(texts[i], rows[i].get("answer", ""), prompt_text(rows[i].get("prompt"))).answer is not None
                out[i] = r if answered else min(r, NO_ANSWER)
        return out

    return length


def make_overlong_reward(max_length: int, cache_length: int):
    """DAPO soft overlong punishment with L_max = the generation budget (`max_completion_length`)."""
    dapo_overlong_penalty(0, max_length, cache_length)  # validates the settings up front

    def overlong(completions, completion_ids=None, **kwargs) -> list[float | None]:
        kinds = _kinds(kwargs, len(completions))
        lengths = _lengths(_texts(completions), completion_ids)
        return [dapo_overlong_penalty(n, max_length, cache_length) if k == "math" else None
                for n, k in zip(lengths, kinds)]

    return overlong
