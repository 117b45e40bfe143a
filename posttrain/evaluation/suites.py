"""The one evaluation loop: a checkpoint on the held-out suites the config names (`data.eval`).

Each suite has a task kind, a mode and a sampling rule; its metrics are `<suite>/<metric>` as the
metric table (posttrain.metrics) lists them for that kind and mode. Per-item outcomes are kept so
gates compare two checkpoints on the same items (paired), not two noisy means.
"""
from __future__ import annotations

import statistics
from pathlib import Path

import torch

from posttrain.chat import parse_response
from posttrain.config.pipeline import EvalSuiteConfig, PipelineConfig
from posttrain.data.files import read_jsonl
from posttrain.generation.engines import Generation, generate_replies, load_generator, release
from posttrain.metrics import FAILED, IFEVAL_ACCURACIES, PER_LANGUAGE, suite_metrics
from posttrain.rewards import prompt_text, verify_row
from posttrain.rewards.format import format_ok, mode_ok, substantive
from posttrain.rewards.ifeval_reference import ifeval_scores
from posttrain.schema import CheckpointRef, DatasetRef, EvalResult

# Part of the evaluation cache key: bump when a metric's definition changes, so cached verdicts of
# the old definition are not reused (eval/7: language consistency is the training reward's, 0 for
# reasoning without content; think-like markers in the answer fail format and mode; `qualified` answers;
# eval/8: IFEval suites also report IFEval's own four accuracies).
EVAL_VERSION = "eval/8"


def reasoning_consistency(response: str, language: str, question: str | None = None) -> float:
    """The training reward's verdict (`posttrain.rewards.language_consistency`, the same function):
    the share of the reasoning's words in the prompt's language, 0 for reasoning without content
    (`substantive`: `…`, an emoji, `\\u200b`, `b e c`) or without an answer; 0 without reasoning.
    Where the reward does not apply (reasoning with content but no words, `1+2=3`), 1: digits and
    symbols are in no language."""
    from posttrain.rewards import language_consistency

    reasoning = parse_response(response).reasoning
    if not reasoning:
        return 0.0
    share = language_consistency([response], [language], questions=[question])[0]
    return (1.0 if substantive(reasoning, question) else 0.0) if share is None else share


def row_mode(suite: EvalSuiteConfig, row: dict) -> bool | None:
    return {"think": True, "no_think": False}.get(suite.mode, row.get("thinking"))


def suite_rows(cfg: PipelineConfig, files: dict[str, DatasetRef] | None = None) -> dict[str, list[dict]]:
    """Normalised rows of every suite: from prepared files, or loaded from the sources now."""
    if files is not None:
        return {name: read_jsonl(Path(ref.path)) for name, ref in files.items()}
    from posttrain.data.prepared import load_suites

    return load_suites(cfg)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def score_suite(suite: EvalSuiteConfig, rows: list[dict], generations: list[list[Generation]]) -> tuple[dict, dict]:
    """(metrics, per-item values) of one suite; an item's value is its mean over the samples drawn."""
    wanted = {m.name for m in suite_metrics(suite.kind, suite.mode)}
    items: dict[str, list[float]] = {name: [] for name in ("accuracy", "format", "mode_compliance",
                                                           "language_consistency", "truncation")}
    lengths = {"len_correct": [], "len_wrong": []}
    with_reasoning, by_language, overrides = [], {}, []
    for row, gens in zip(rows, generations, strict=True):
        # A reply cut off at the token budget never ended: it earns nothing, whatever it met so far
        # (an untrained base rambling to the budget met instruction constraints 21% of the time).
        verdicts = [verify_row(g.text, row, truncated=g.truncated) for g in gens]
        scores = [score for score, _ in verdicts]
        items["accuracy"].append(_mean(scores))
        overrides.append(_mean([float(reason.startswith("guard:")) for _, reason in verdicts]))
        # Judged in the mode its prompt was rendered in (Generation.thinking), as training judges it.
        question = prompt_text(row.get("prompt"))
        items["format"].append(_mean([float(format_ok(g.text, g.thinking, question)) for g in gens]))
        items["mode_compliance"].append(_mean([float(mode_ok(g.text, thinking=False)) for g in gens]))
        consistency = [reasoning_consistency(g.text, row.get("language", "en"), question) for g in gens]
        items["language_consistency"].append(_mean(consistency))
        with_reasoning += [c for g, c in zip(gens, consistency) if parse_response(g.text).reasoning]
        items["truncation"].append(_mean([float(g.truncated) for g in gens]))
        for g, s in zip(gens, scores):
            lengths["len_correct" if s == 1 else "len_wrong"].append(g.num_tokens)
        by_language.setdefault(row.get("language", "en"), []).append(items["accuracy"][-1])
    if suite.kind == "tool":
        tool_metrics(rows, generations, items)
    per_item = {name: values for name, values in items.items() if name in wanted}
    metrics = {name: _mean(values) for name, values in per_item.items()}
    metrics.update({name: _mean(values) for name, values in items.items() if name.startswith(FAILED)})
    if "guard_overrides" in wanted:
        metrics["guard_overrides"] = _mean(overrides)
    if rows and all("ifeval" in row for row in rows) and set(IFEVAL_ACCURACIES.values()) <= wanted:
        replies = [[(g.text, g.truncated) for g in gens] for gens in generations]
        for key, (value, values) in ifeval_scores(rows, replies).items():
            metrics[IFEVAL_ACCURACIES[key]] = value
            per_item.update({IFEVAL_ACCURACIES[key]: values} if values is not None else {})
    if "mixed_language" in wanted:
        metrics["mixed_language"] = _mean([float(c < 1.0) for c in with_reasoning])
    metrics.update({name: _mean(values) for name, values in lengths.items() if name in wanted})
    if len(by_language) > 1:
        metrics.update({f"{PER_LANGUAGE}{lang}": _mean(v) for lang, v in sorted(by_language.items())})
    prefix = f"{suite.name}/"
    return ({prefix + k: v for k, v in metrics.items()}, {prefix + k: v for k, v in per_item.items()})


def tool_metrics(rows: list[dict], generations: list[list[Generation]], items: dict[str, list[float]]) -> None:
    """A tool suite's calls per episode, share of calls answered with an error, and the share of
    episodes that failed for each reason (the verdict's: wrong_state, forged_turn, call_budget, ...)."""
    from posttrain.agents.episodes import episode_of_transcript

    calls, errors, reasons = [], [], []
    for row, gens in zip(rows, generations):
        episodes = [episode_of_transcript(g.text, row) for g in gens]
        calls.append(_mean([float(len(e.calls)) for e in episodes]))
        errors.append(_mean([_mean([float(c["error"] is not None) for c in e.calls]) for e in episodes if e.calls]))
        reasons.append([reason for g in gens if (reason := verify_row(g.text, row, truncated=g.truncated)[1]) != "solved"])
    items["tool_calls"], items["tool_errors"] = calls, errors
    for reason in sorted({r.split(":", 1)[0] for found in reasons for r in found}):
        items[FAILED + reason] = [_mean([float(r.split(":", 1)[0] == reason) for r in found]) if found else 0.0
                                  for found in reasons]


def evaluate(checkpoint: CheckpointRef | str | Path, cfg: PipelineConfig, *, suites: dict[str, DatasetRef] | None = None,
             model=None, tokenizer=None, desc: str = "evaluating", budget_curve: bool = False,
             reward_model: str | Path | None = None) -> EvalResult:
    """The checkpoint on every suite; with `budget_curve`, also the thinking-budget curve
    (evaluation.budget_curve: the stages from mode fusion on); with `reward_model` (a directory), also
    its score of the replies to open-ended suites (`<suite>/reward_model`: what training pays,
    described beside the independent check the suite is gated on)."""
    torch.set_num_threads(cfg.evaluation.threads)
    settings = cfg.base.settings()
    rows = suite_rows(cfg, suites)
    if model is not None:
        return _evaluate(model, tokenizer, cfg, rows, desc, budget_curve, reward_model)
    model, tokenizer = load_generator(checkpoint, settings, cfg.evaluation)
    try:
        return _evaluate(model, tokenizer, cfg, rows, desc, budget_curve, reward_model)
    finally:
        release(model)


def _evaluate(model, tokenizer, cfg: PipelineConfig, rows: dict[str, list[dict]], desc: str,
              budget_curve: bool = False, reward_model: str | Path | None = None) -> EvalResult:
    configs = [s for s in cfg.data.suites() if s.name in rows]   # the suites asked for
    generations = suite_generations(model, tokenizer, cfg, rows, desc)
    metrics, per_item, samples = {}, {}, []
    for s in configs:
        suite_metrics_, suite_items = score_suite(s, rows[s.name], generations[s.name])
        metrics.update(suite_metrics_)
        per_item.update(suite_items)
        samples += [{"suite": s.name, "question": r["prompt"][-1]["content"], "response": g[0].text}
                    for r, g in list(zip(rows[s.name], generations[s.name]))[:2]]
    suite_name = cfg.budget_curve_suite()
    if budget_curve and suite_name is not None:
        curve_metrics, curve_items = thinking_budget_curve(model, tokenizer, cfg, rows[suite_name],
                                                           generations[suite_name], suite_name, desc)
        metrics.update(curve_metrics)
        per_item.update(curve_items)
    open_suites = [s for s in configs if s.kind == "open" and rows[s.name]]
    if reward_model is not None and open_suites:
        from posttrain.rewards.reward_model import RewardModelScorer
        from posttrain.rewards.model_based import conversation_scores

        scorer = RewardModelScorer(reward_model)
        for s in open_suites:
            replies = [(r["prompt"], g.text) for r, gens in zip(rows[s.name], generations[s.name]) for g in gens]
            raw = conversation_scores(scorer, [p for p, _ in replies], [t for _, t in replies])
            metrics[f"{s.name}/reward_model"] = _mean(raw)
    return EvalResult(metrics=metrics, per_item=per_item, samples=samples,
                      items={s.name: len(rows[s.name]) for s in configs})


def suite_generations(model, tokenizer, cfg: PipelineConfig, rows: dict[str, list[dict]],
                      desc: str) -> dict[str, list[list[Generation]]]:
    """The replies to every suite's rows, drawn as the suite says (what score_suite scores)."""
    settings = cfg.base.settings()
    configs = [s for s in cfg.data.suites() if s.name in rows]   # the suites asked for
    batch = cfg.evaluation.batch_size

    def budget(s) -> int:
        return s.max_new_tokens or cfg.evaluation.max_new_tokens

    # Greedy suites of one token budget share one generation call (length-sorted batches across
    # suites); sampled suites draw their k samples each; tool suites run their episodes.
    generations: dict[str, list[list[Generation]]] = {}
    for s in (s for s in configs if s.kind == "tool"):
        from posttrain.agents.rollouts import run_episodes

        generations[s.name] = run_episodes(model, tokenizer, settings.chat, [(r, row_mode(s, r)) for r in rows[s.name]],
                                           desc=f"{desc} ({s.name})", max_new_tokens=budget(s), batch_size=batch)
    greedy = [s for s in configs if s.sampling.samples == 1 and s.kind != "tool"]
    for tokens in sorted({budget(s) for s in greedy}):
        shared = [s for s in greedy if budget(s) == tokens]
        requests = [(r["prompt"], row_mode(s, r)) for s in shared for r in rows[s.name]]
        outputs = generate_replies(model, tokenizer, settings.chat, requests, desc=desc, max_new_tokens=tokens,
                                   batch_size=batch) if requests else []
        start = 0
        for s in shared:
            generations[s.name] = outputs[start:start + len(rows[s.name])]
            start += len(rows[s.name])
    for s in configs:
        if s.sampling.samples > 1 and s.kind != "tool":
            generations[s.name] = generate_replies(
                model, tokenizer, settings.chat, [(r["prompt"], row_mode(s, r)) for r in rows[s.name]],
                do_sample=True, temperature=s.sampling.temperature, top_p=s.sampling.top_p,
                num_samples=s.sampling.samples, seed=s.sampling.seed, desc=f"{desc} ({s.name})",
                max_new_tokens=budget(s), batch_size=batch)
    return generations


def think_length(tokenizer, text: str) -> int | None:
    """Tokens of a reply's think block, or None when it has no closed one."""
    reasoning = parse_response(text).reasoning
    return None if reasoning is None else len(tokenizer(reasoning, add_special_tokens=False)["input_ids"])


def budget_points(lengths: list[int], quantiles: list[float]) -> dict[str, int]:
    """Budgets at quantiles (nearest rank) of the measured think lengths, labelled q<percent>, and 0."""
    ordered = sorted(lengths)
    if not ordered:
        return {"0": 0}
    return {"0": 0, **{f"q{round(q * 100)}": max(1, ordered[min(len(ordered) - 1, int(q * len(ordered)))])
                       for q in quantiles}}


def thinking_budget_curve(model, tokenizer, cfg: PipelineConfig, rows: list[dict], plain: list[list[Generation]],
                          suite: str, desc: str) -> tuple[dict, dict]:
    """Accuracy of the suite's first `items` items at each thinking budget (greedy): budget 0, the
    quantiles of this checkpoint's think length, and unlimited (the suite's plain replies), with
    the share of replies the budget cut. A budgeted reply gets the inserted sentence's tokens on
    top of the evaluation's token budget, so the insertion does not eat the answer's room."""
    from posttrain.generation.engines import ThinkingBudget

    curve, chat = cfg.evaluation.budget_curve, cfg.base.settings().chat
    rows, plain = rows[:curve.items], plain[:curve.items]
    closed = [n for gens in plain for g in gens if not g.truncated and (n := think_length(tokenizer, g.text)) is not None]
    metrics = {f"{suite}/think_tokens": _mean([float(n) for n in closed])}
    per_item = {f"{suite}/budget_unlimited/accuracy": [_mean([verify_row(g.text, r, truncated=g.truncated)[0]
                                                               for g in gens]) for r, gens in zip(rows, plain)]}
    metrics[f"{suite}/budget_unlimited/accuracy"] = _mean(per_item[f"{suite}/budget_unlimited/accuracy"])
    metrics[f"{suite}/budget_unlimited/tokens"] = float(cfg.evaluation.max_new_tokens)
    for label, tokens in budget_points(closed, curve.quantiles).items():
        budget = ThinkingBudget(tokens=tokens, sentence=chat.stop_thinking, think_open=chat.think_open,
                                think_close=chat.think_close)
        room = len(tokenizer(budget.inserted(), add_special_tokens=False)["input_ids"])
        replies = generate_replies(model, tokenizer, chat, [(r["prompt"], True) for r in rows],
                                   max_new_tokens=cfg.evaluation.max_new_tokens + room,
                                   batch_size=cfg.evaluation.batch_size, thinking_budget=budget,
                                   desc=f"{desc} (thinking budget {tokens})")
        name = f"{suite}/budget_{label}"
        per_item[f"{name}/accuracy"] = [verify_row(g.text, r, truncated=g.truncated)[0] for r, (g,) in zip(rows, replies)]
        metrics[f"{name}/accuracy"] = _mean(per_item[f"{name}/accuracy"])
        metrics[f"{name}/tokens"] = float(tokens)
        metrics[f"{name}/cut"] = _mean([float(g.budget_cut) for (g,) in replies])
    return metrics, per_item


def by_field(rows: list[dict], scores: list[float], field: str) -> dict[str, float]:
    """Mean of per-item scores grouped by a column of the suite's rows (e.g. `group`): an average
    gain can hide one kind of problem collapsing."""
    groups: dict[str, list[float]] = {}
    for row, score in zip(rows, scores, strict=True):
        groups.setdefault(str(row.get(field, "?")), []).append(score)
    return {key: statistics.fmean(values) for key, values in sorted(groups.items())}
