"""Model-based rewards for the open-ended kind (Qwen3 sec. 4.4): a reward model's score of the
conversation, as a plain GRPO reward function (None on rows of other kinds, which keep their rule
rewards).

The raw score has no fixed scale, so it is normalised within each GRPO group (the completions of
one prompt in a batch: z-scores over the finished replies), which keeps its weight beside the rule
rewards meaningful; `length_debias` also removes, per group, the part of the score a straight line
in the reply's token count explains (a reward model that learnt "longer is better" stops paying
length). A reply cut off at the token budget is paid the lowest score of its group's finished
replies (0 when none finished): never more than an answer that ended.

Each call logs, through TRL's `log_metric`, the raw score's mean and, where the rows carry an
independent check (`verify_row`'s verdict of the open kind: their constraints and answer), that
check's mean on the same replies: `RLAlerts` fires `goodhart` when the first rises while the
second falls."""
from __future__ import annotations

import json
import math

REWARD_MODEL_VERSION = "reward-model/1"
RAW_SCORE = "reward_model/raw_score"
CHECKED = "reward_model/independent_check"
CHECKED_REPLIES = "reward_model/checked_replies"   # how many replies CHECKED is a share of


def _group_keys(rows: list[dict]) -> list[str]:
    return [json.dumps(row.get("prompt"), sort_keys=True, ensure_ascii=False) for row in rows]


def _residuals(xs: list[float], ys: list[float]) -> list[float]:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = 0.0 if sxx == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return [y - my - slope * (x - mx) for x, y in zip(xs, ys)]


def normalise_groups(scores: list[float], groups: list[str], finished: list[bool], lengths: list[int],
                     *, length_debias: bool = False) -> list[float]:
    """Per group: z-scores of the finished replies' scores (optionally of their residuals after a
    linear fit on length), truncated replies at the group's minimum."""
    out = [0.0] * len(scores)
    for key in dict.fromkeys(groups):
        members = [i for i, g in enumerate(groups) if g == key]
        done = [i for i in members if finished[i]]
        values = [scores[i] for i in done]
        if length_debias and len(done) > 2:
            values = _residuals([float(lengths[i]) for i in done], values)
        if done:
            mean = sum(values) / len(values)
            std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
            for i, v in zip(done, values):
                out[i] = 0.0 if std < 1e-6 else (v - mean) / std
        floor = min((out[i] for i in done), default=0.0)
        for i in members:
            if not finished[i]:
                out[i] = floor
    return out


def conversation_scores(scorer, prompts: list, replies: list[str]) -> list[float]:
    """The reward model's raw score of each reply after its prompt: what training pays (before the
    group normalisation) and what evaluation reports, rendered once."""
    return scorer.scores([_messages(p) + [{"role": "assistant", "content": r}] for p, r in zip(prompts, replies)])


def make_reward_model_reward(settings):
    """The `reward_model` reward of a stage: `settings.reward_model` (a RewardModelScorer) scores the
    rows of the kinds it pays (posttrain.rewards.TASKS)."""
    from posttrain.rewards import completion_text, kinds_paid_by, task_rows, truncated_flags, verify_batch

    scorer = settings.reward_model
    kinds = kinds_paid_by("reward_model")

    def reward_model(completions, task=None, completion_ids=None, log_metric=None, **columns) -> list[float | None]:
        rows = task_rows(completions, task, columns)
        todo = [i for i, row in enumerate(rows) if row.get("kind") in kinds]
        out: list[float | None] = [None] * len(completions)
        if not todo:
            return out
        if scorer is None:
            raise ValueError("the reward_model reward has no reward model: the chain's reward model stage gives it")
        cut = truncated_flags(completion_ids, settings.stop_ids, len(completions))
        texts = [completion_text(completions[i]) for i in todo]
        raw = conversation_scores(scorer, [rows[i].get("prompt") for i in todo], texts)
        lengths = [len(completion_ids[i]) if completion_ids is not None else len(t) for i, t in zip(todo, texts)]
        normalised = normalise_groups(raw, _group_keys([rows[i] for i in todo]), [not cut[i] for i in todo], lengths,
                                      length_debias=settings.reward_model_length_debias)
        for i, value in zip(todo, normalised):
            out[i] = value
        if log_metric is not None:
            log_metric(RAW_SCORE, sum(raw) / len(raw))
            checked = [j for j, i in enumerate(todo) if rows[i].get("constraints")]
            if checked:
                verdicts = verify_batch([texts[j] for j in checked], [rows[todo[j]] for j in checked],
                                        [cut[todo[j]] for j in checked])
                log_metric(CHECKED, sum(v[0] for v in verdicts) / len(verdicts))
                log_metric(CHECKED_REPLIES, float(len(verdicts)))
        return out

    reward_model.model_based = True
    reward_model.kinds = kinds
    return reward_model


def _messages(prompt) -> list[dict]:
    if isinstance(prompt, list):
        return [dict(m) for m in prompt]
    return [{"role": "user", "content": prompt or ""}]
