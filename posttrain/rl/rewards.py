"""An RL stage's rewards as TRL calls them: the reward table's functions on whole replies, the task
rewards feeding the problem sampler's statistics (`tracked`) and watched by the live check that
training pays what evaluation scores (`EvalDisagreement`)."""
from __future__ import annotations

import json
import math

from posttrain.rl.sampling import ProblemStats
from posttrain.rl.alerts import EVAL_DISAGREEMENT

# What each task kind's rows were paid, per batch: `reward_by_kind/<kind>` in the training log and the
# stage's metrics (the report card); the model-based rewards log their own (`reward_model/*`, `judge/*`).
BY_KIND = "reward_by_kind/"


def by_kind(log: list[dict]) -> tuple[str, ...]:
    """The `reward_by_kind/<kind>` keys a stage's training log holds."""
    return tuple(sorted({key for row in log for key in row if key.startswith(BY_KIND)}))


def tracked(reward, stats: ProblemStats, num_generations: int):
    """A task reward (posttrain.rewards.make_task_reward) that also records each group's verdicts
    for the sampler and logs the group, length and verifier-reason statistics of the groups it
    scores (through TRL's `log_metric`). The statistics read the reward's own verdicts: what the
    sampler calls solved is what training pays and evaluation scores."""

    def task_reward(completions, problem_index, completion_ids=None, log_metric=None, kind=None, **kwargs):
        verdicts = reward.verdicts(completions, completion_ids=completion_ids,
                                   **({} if kind is None else {"kind": kind}), **kwargs)
        scored = [i for i, v in enumerate(verdicts) if v is not None]
        if scored:
            lengths = [len(completion_ids[i]) for i in scored] if completion_ids else [0] * len(scored)
            stats.record([problem_index[i] for i in scored], [verdicts[i][0] for i in scored], num_generations,
                         lengths, [verdicts[i][1] for i in scored])
            if log_metric is not None:
                for key, value in stats.last_batch.items():
                    if not math.isnan(value):
                        log_metric(key, value)
                for row_kind in sorted({kind[i] for i in scored} if kind else ()):
                    paid = [verdicts[i][0] for i in scored if kind[i] == row_kind]
                    log_metric(f"{BY_KIND}{row_kind}", sum(paid) / len(paid))
        return [None if v is None else v[0] for v in verdicts]

    task_reward.__name__ = reward.__name__
    return task_reward


class EvalDisagreement:
    """Live check that training pays what evaluation scores: a sample of each batch's rollouts is
    re-scored the way evaluation scores a reply (decoded from the token ids as generation decodes
    them, the template's pre-filled part put back, truncation by generation's own stop tokens, then
    `verify_row` on the row) and compared with the task reward's value for the same rollout. Logged
    as `reward/eval_disagreement` (the share that differ); RLAlerts fires above its limit."""

    KEY = EVAL_DISAGREEMENT

    def __init__(self, tokenizer, chat, stop_ids: set[int], sample: int = 8):
        self.tokenizer, self.chat, self.stop_ids, self.sample = tokenizer, chat, set(stop_ids), sample

    def evaluation_score(self, ids: list[int], prefill: str, task: str) -> float:
        from posttrain.chat import to_canonical
        from posttrain.rewards import verify_row

        kept = [t for t in ids if t != self.tokenizer.pad_token_id]
        text = to_canonical(prefill + self.tokenizer.decode(kept, skip_special_tokens=True), self.chat)
        truncated = not kept or kept[-1] not in self.stop_ids
        return verify_row(text, json.loads(task), truncated=truncated)[0]

    def rate(self, scores: list, task: list[str], completion_ids, prefill) -> float | None:
        # A tool episode has no single decode: its verdict replays the episode's calls in the environment,
        # from the transcript evaluation renders the same way (posttrain.rewards.completion_text).
        scored = [i for i, s in enumerate(scores) if s is not None and json.loads(task[i]).get("kind") != "tool"]
        if not scored or completion_ids is None:
            return None
        step = max(1, len(scored) // self.sample)
        chosen = scored[::step][:self.sample]
        prefill = prefill or [""] * len(scores)
        differ = [self.evaluation_score(completion_ids[i], prefill[i], task[i]) != scores[i] for i in chosen]
        return sum(differ) / len(differ)

    def watch(self, reward):
        """`reward` (whole-reply task reward, as TRL calls it) with the check logged on each call."""
        def monitored(completions, task, completion_ids=None, prefill=None, log_metric=None, **kwargs):
            scores = reward(completions, task=task, completion_ids=completion_ids, prefill=prefill,
                            log_metric=log_metric, **kwargs)
            rate = self.rate(scores, task, completion_ids, prefill)
            if rate is not None and log_metric is not None:
                log_metric(self.KEY, rate)
            return scores

        monitored.__name__ = reward.__name__
        return monitored


def stage_rewards(weights: dict[str, float], settings, *, chat, tokenizer, model, stats: ProblemStats | None = None):
    """(reward functions as TRL calls them, their weights) of an RL stage: `build_rewards`' table,
    each on whole replies; the task rewards also feed the sampler's statistics (with `stats`) and
    the evaluation-disagreement monitor."""
    from posttrain.generation.engines import _stop_ids
    from posttrain.rewards import build_rewards, on_whole_replies

    funcs, weights = build_rewards(weights, settings)
    monitor = EvalDisagreement(tokenizer, chat, _stop_ids(model, tokenizer))
    out = []
    for fn in funcs:
        if getattr(fn, "kinds", None) is None or getattr(fn, "model_based", False):   # shaping or model-based
            out.append(on_whole_replies(fn, chat))
            continue
        scored = tracked(fn, stats, settings.num_generations) if stats is not None else fn
        out.append(monitor.watch(on_whole_replies(scored, chat)))
    return out, weights
