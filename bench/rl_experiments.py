"""Reasoning-RL experiments of issue 4 on the embedded world: each arm (a set of stage-config
overrides) trained from the same cold-start checkpoint with several seeds, then evaluated on the
held-out suites. Mean and 95% CI over seeds (t distribution) per arm.

    python bench/rl_experiments.py --parent runs/<run>/cold_start_sft/checkpoint \
        --experiment gain --seeds 0 1 2
    # or train the parent here, from a cold start that gives the reward under test something to
    # remove: answers double-checked (length reward, loss type) or steps in two languages
    python bench/rl_experiments.py --cold-start double_check_share=0.9 --experiment length_reward \
        --set evaluation.max_new_tokens=256 --set stages.reasoning_rl.trainer.max_completion_length=256
    python bench/rl_experiments.py --cold-start mixed_language_share=0.5 --experiment language_reward
    # or answers stated without the working half the time (what RL should learn to stop doing)
    python bench/rl_experiments.py --cold-start answer_only_share=0.5 --experiment gain

`--cold-start` takes the alteration shares of bench/cold_start_variants.py; any other key is an
override inside stages.cold_start_sft (e.g. trainer.epochs=2).

Finished (arm, seed) runs are kept in bench/results/rl_experiments.json and skipped when the
command is repeated, so a long grid can be filled in over several sessions. Training curves
(completion length, correctness, held-out probe) per experiment and parent: bench/results/rl_curves/.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from posttrain.env import configure_offline

configure_offline()
sys.path.insert(0, str(Path(__file__).resolve().parent))   # the bench's own modules, however this is loaded

from cold_start_variants import split_settings, write_variant  # noqa: E402
from stage_data import by_group, math_rows, prepared_data, stage_inputs, thinking_replies  # noqa: E402

from posttrain.registry.checkpoint import directory_digest, load_checkpoint  # noqa: E402
from posttrain.config.loading import load_config  # noqa: E402
from posttrain.evaluation.suites import evaluate  # noqa: E402
from posttrain.schema import CheckpointRef  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
STORE = RESULTS / "rl_experiments.json"
CURVES = RESULTS / "rl_curves"
PARENTS = Path(__file__).resolve().parent / "parents"   # cold-start checkpoints built by --cold-start (not in git)

RS_SFT_ARM = "rs_sft"
RS_SFT = {"learning_rate": 2e-4, "epochs": 2, "max_per_prompt": 2}

# experiment -> arm -> overrides inside stages.reasoning_rl
EXPERIMENTS: dict[str, dict[str, dict]] = {
    "gain": {"default": {}},
    "loss_type": {"grpo": {"trainer.loss_type": "grpo"}, "dr_grpo": {"trainer.loss_type": "dr_grpo"}},
    "language_reward": {"on": {"rewards.language_consistency": 0.2}, "off": {"rewards.language_consistency": 0.0}},
    "length_reward": {"on": {"rewards.length": 0.2, "reward_settings.length_warmup_steps": 10},
                      "off": {"rewards.length": 0.0}},
    # Same generated tokens: RL (the default stage) vs rejection-sampling SFT, i.e. sample groups
    # from the parent on the same prompt pool until RL's completion-token count is spent, keep the
    # verified ones, fine-tune the parent on them (RFT). The budget is that of the default RL run
    # with the same seed and parent; the SFT settings are RS_SFT above.
    "equal_budget": {"rl": {}, "rs_sft": {RS_SFT_ARM: True}},
}
REPORTED = ["math/accuracy", "math/mixed_language", "math/language_consistency", "math/len_correct",
            "math/len_wrong", "math/format", "math/truncation"]
# Held-out math measured by more_math_metrics; runs recorded before it existed show "–".
MORE = ["math/training_phrasing", "math/sampled_pass1", "math/answer_only_rate"]
# The RL stage's held-out probe in its training log.
PROBE = "heldout/math_accuracy"
# Metric names of runs recorded before suites named their metrics `<suite>/<metric>`: read through
# this table, never rewritten in the recorded file.
OLD_NAMES = {
    "math_accuracy": "math/accuracy", "math_accuracy_en": "math/accuracy_en", "math_accuracy_zh": "math/accuracy_zh",
    "format_rate": "math/format", "language_consistency": "math/language_consistency",
    "mixed_language_rate": "math/mixed_language", "mean_len_correct": "math/len_correct",
    "mean_len_wrong": "math/len_wrong", "truncation_rate": "math/truncation",
    "no_think_compliance": "no_think/mode_compliance", "no_think_accuracy": "no_think/accuracy",
    "no_think_format": "no_think/format", "instruction_accuracy": "instruction/accuracy",
    "direct_accuracy": "direct/accuracy", "math_training_phrasing": "math/training_phrasing",
    "math_sampled_pass1": "math/sampled_pass1", "math_answer_only_rate": "math/answer_only_rate",
}


def renamed(metrics: dict) -> dict:
    """A recorded metrics dict under today's names."""
    return {OLD_NAMES.get(k, k): v for k, v in metrics.items()}


# Two-sided 95% quantiles of Student's t by degrees of freedom (no scipy in the install).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def t_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% CI over seeds."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, float("nan"), float("nan")
    half = T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def wrong_length_slope(log: list[dict]) -> float | None:
    """Least-squares slope of the mean wrong-completion length per step (tokens per step)."""
    points = [(row["step"], row["length/wrong"]) for row in log if "length/wrong" in row and "step" in row]
    if len(points) < 3:
        return None
    xs, ys = zip(*points)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else None


def arm_config(config_path: str, overrides: dict, extra: dict, stage: str = "reasoning_rl", data: dict | None = None):
    """The pipeline config of an arm: `extra` holds full dotted paths (`--set`, the same for every
    arm, e.g. `evaluation.max_new_tokens`), the arm's overrides are inside stages.<stage>, `data`
    points data roles elsewhere (a cold-start variant)."""
    return load_config(config_path, overrides={**extra, **(data or {}),
                                               **{f"stages.{stage}.{k}": v for k, v in overrides.items()}})


def stage_config_hash(config_path: str, overrides: dict, extra: dict) -> str:
    """Identity of what an arm trains and is evaluated with, so an arm equal to another (e.g.
    language reward "on" is the default) reuses that arm's runs instead of training them again."""
    if overrides.get(RS_SFT_ARM):
        return f"{RS_SFT_ARM}:{stage_config_hash(config_path, {}, extra)}:{json.dumps(RS_SFT, sort_keys=True)}"
    cfg = arm_config(config_path, overrides, extra)
    identity = {"stage": cfg.stage("reasoning_rl").model_dump(mode="json"),
                "evaluation": cfg.evaluation.model_dump(mode="json"), "data": cfg.data.model_dump(mode="json")}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def build_parent(config_path: str, cold_start: dict, extra: dict) -> Path:
    """A cold-start checkpoint trained from the config's base on a cold-start variant (the shares
    of bench/cold_start_variants.py, e.g. double_check_share=0.5; other keys are overrides inside
    stages.cold_start_sft), kept under bench/parents/ for reuse."""
    from posttrain.world.build import base_checkpoint
    from stages import cold_start_sft

    variant, overrides = split_settings(cold_start)
    cfg = arm_config(config_path, overrides, extra, stage="cold_start_sft")
    counts, data = {}, None
    if variant.altered:
        data, counts = write_variant(cfg, variant, PARENTS / "data")
        cfg = arm_config(config_path, overrides, extra, stage="cold_start_sft", data=data)
    prepared = prepared_data(cfg, ("cold_start_sft",))
    base = base_checkpoint(cfg, "teacher")
    # Fields left at their defaults stay out, so a field added later does not orphan built parents;
    # the data is named by its content, so a rebuilt world or another variant is another parent.
    identity = {"stage": cfg.stage("cold_start_sft").model_dump(mode="json", exclude_defaults=True),
                "data": prepared.roles["cold_start"].md5, "base": base.digest, "seed": cfg.seed,
                "version": cold_start_sft.STAGE_VERSION}
    work = PARENTS / hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    if not (work / "checkpoint" / "config.json").exists():
        cold_start_sft.run(cfg.stage("cold_start_sft"), stage_inputs(
            cfg, "cold_start_sft", prepared, work_dir=work, parent=base, seed=cfg.seed))
        (work / "identity.json").write_text(json.dumps({**identity, "variant": variant.as_dict(), "altered": counts},
                                                       indent=2))
    return work / "checkpoint"


# R1's pass@1: the mean correctness of k samples at temperature 0.6, top-p 0.95 (DeepSeek-R1, section 3.1).
SAMPLED_PASS1 = {"samples": 4, "temperature": 0.6, "top_p": 0.95}


def world_problems(cfg, rows: list[dict]) -> list[dict]:
    """The world problem (language, op, a, b, question) behind each held-out math row (the prompt
    rows carry no operands), matched by id and question."""
    from posttrain.world.build import held_out_math

    drawn = {p.id: p.to_row() for p in held_out_math(cfg)}
    problems = []
    for row in rows:
        problem = drawn.get(row.get("id"))
        if problem is None or problem["question"] != row["prompt"][-1]["content"]:
            raise SystemExit(f"held-out math row {row.get('id')!r} is not the embedded world's problem of that id: "
                             "training phrasings need the world's eval_math suite, as `dvc repro` builds it from "
                             "this config's `world:` settings")
        problems.append(problem)
    return problems


def more_math_metrics(model, tokenizer, cfg, rows: list[dict]) -> dict[str, float]:
    """Held-out math beyond the greedy suite score: the same problems asked with training
    phrasings (greedy), R1's sampled pass@1 on the suite, and the share of those samples that
    state the result without the working (reflection.answer_only). Greedy hides a policy that has become
    more reliable when sampled; the suite's unseen phrasings hide a gain on unseen problems."""
    from posttrain.rewards import verify_row
    from posttrain.world.reflection import is_answer_only
    from posttrain.world.rephrase import with_training_phrasing

    def score(outputs) -> float:
        return statistics.fmean(statistics.fmean(verify_row(g.text, r)[0] for g in group)
                                for group, r in zip(outputs, rows, strict=True))

    rephrased = thinking_replies(model, tokenizer, cfg, [[{"role": "user", "content": q}] for q in
                                                         with_training_phrasing(world_problems(cfg, rows))],
                                 desc="held-out problems, training phrasings")
    sampled = thinking_replies(model, tokenizer, cfg, [r["prompt"] for r in rows], do_sample=True,
                               temperature=SAMPLED_PASS1["temperature"], top_p=SAMPLED_PASS1["top_p"],
                               num_samples=SAMPLED_PASS1["samples"], desc="sampled pass@1")
    return {"math/training_phrasing": score(rephrased), "math/sampled_pass1": score(sampled),
            "math/answer_only_rate": statistics.fmean(is_answer_only(g.text) for group in sampled for g in group)}


def training_curve(log: list[dict]) -> list[list[float]]:
    """(step, mean completion length, mean correctness reward) per logged step: R1's figure of
    response length and accuracy growing together, when RL learns to work problems out."""
    return [[row["step"], row["completions/mean_length"], row["rewards/correctness/mean"]] for row in log
            if "completions/mean_length" in row and "rewards/correctness/mean" in row]


def generated_tokens(log: list[dict], completions_per_step: int) -> int:
    """Completion tokens RL generated: mean completion length x completions, over logged steps."""
    return round(sum(row["completions/mean_length"] * completions_per_step
                     for row in log if "completions/mean_length" in row))


def measured(checkpoint: CheckpointRef, cfg, data, desc: str, model=None, tokenizer=None) -> dict:
    """Every suite metric of a checkpoint, the held-out math of more_math_metrics, and held-out math
    by problem group (`math_by_kind`)."""
    if model is None:
        model, tokenizer = load_checkpoint(checkpoint, for_training=False, settings=cfg.base.settings())
    after = evaluate(checkpoint, cfg, suites=data.suites, model=model, tokenizer=tokenizer, desc=desc)
    rows = math_rows(data)
    return {**after.metrics, **more_math_metrics(model, tokenizer, cfg, rows),
            "math_by_kind": by_group(rows, after.per_item["math/accuracy"])}


def run_record(scores: dict) -> dict:
    """What a run records of `measured`: the reported metrics and math by kind."""
    return {"metrics": {k: scores[k] for k in REPORTED + MORE}, "math_by_kind": scores["math_by_kind"]}


def run_arm(config_path: str, parent: CheckpointRef, overrides: dict, seed: int, extra: dict) -> dict:
    from stages import reasoning_rl

    cfg = arm_config(config_path, overrides, extra)
    stage = cfg.stage("reasoning_rl")
    data = prepared_data(cfg, ("reasoning_rl",))
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        result = reasoning_rl.run(stage, stage_inputs(cfg, "reasoning_rl", data, work_dir=tmp, parent=parent, seed=seed))
        scores = run_record(measured(result.checkpoint, cfg, data, f"evaluating seed {seed}"))
    per_step = stage.trainer.prompts_per_step * stage.trainer.num_generations
    return {"seed": seed, "overrides": overrides, "wall_s": time.time() - started, **scores,
            "wrong_length_slope": wrong_length_slope(result.train_log),
            "generated_tokens": generated_tokens(result.train_log, per_step),
            "heldout_curve": [[row["step"], row[PROBE]] for row in result.train_log if PROBE in row],
            "training_curve": training_curve(result.train_log)}


def run_rs_sft_arm(config_path: str, parent: CheckpointRef, seed: int, extra: dict, budget: int) -> dict:
    """Rejection-sampling SFT on `budget` generated tokens, from the RL stage's prompts and sampling."""
    import random

    import torch
    from trl import SFTTrainer

    from posttrain.registry.checkpoint import save_checkpoint
    from posttrain.config.trainers import SFTTrainerConfig
    from posttrain.data.files import read_jsonl
    from posttrain.generation.engines import generate_replies
    from posttrain.training.trainers import require_rows, sft_args, sft_dataset
    from stages.rejection_sampling import rejection_reason

    cfg = arm_config(config_path, {}, extra)
    stage, settings = cfg.stage("reasoning_rl"), cfg.base.settings()
    data = prepared_data(cfg, ("reasoning_rl",))
    started = time.time()
    torch.set_num_threads(stage.trainer.threads)
    model, tokenizer = load_checkpoint(parent, settings=settings)
    problems = read_jsonl(Path(data.roles["reasoning_prompts"].path))
    random.Random(seed).shuffle(problems)
    group, spent, rows, sampled, chunk = stage.trainer.num_generations, 0, [], 0, 8
    while spent < budget and sampled < len(problems):
        batch = problems[sampled:sampled + chunk]
        sampled += len(batch)
        # Each prompt in its own mode, as the RL stage renders it.
        outputs = generate_replies(model, tokenizer, settings.chat, [(p["prompt"], p.get("thinking")) for p in batch],
                                   max_new_tokens=stage.trainer.max_completion_length, do_sample=True,
                                   temperature=stage.trainer.temperature, num_samples=group,
                                   seed=seed * 100_003 + sampled, desc=f"rs-sft sampling {spent}/{budget} tokens")
        for problem, responses in zip(batch, outputs):
            spent += sum(r.num_tokens for r in responses)
            kept = {" ".join(r.text.split()): r.text for r in responses if rejection_reason(r, problem, 1.0) is None}
            rows += [{"messages": problem["prompt"] + [{"role": "assistant", "content": text}],
                      "thinking": problem.get("thinking")} for text in list(kept.values())[:RS_SFT["max_per_prompt"]]]
    require_rows(rows, "rs_sft", f"the verified samples of {sampled} prompts")
    trainer_cfg = SFTTrainerConfig(learning_rate=RS_SFT["learning_rate"], epochs=RS_SFT["epochs"],
                                   threads=stage.trainer.threads)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = SFTTrainer(model=model, args=sft_args(trainer_cfg, Path(tmp) / "trainer", seed),
                             train_dataset=sft_dataset(tokenizer, settings.chat, rows)[0], processing_class=tokenizer)
        trainer.train()
        checkpoint = save_checkpoint(trainer.model, tokenizer, Path(tmp) / "checkpoint")
        scores = run_record(measured(checkpoint, cfg, data, f"evaluating rs-sft seed {seed}"))
    return {"seed": seed, "wall_s": time.time() - started, **scores,
            "wrong_length_slope": None, "generated_tokens": spent, "budget_tokens": budget,
            "prompts_sampled": sampled, "sft_rows": len(rows), "rs_sft": RS_SFT}


def kinds_cell(by_kind: list[dict | None]) -> str:
    known = [k for k in by_kind if k]
    if not known:
        return "–"
    return " ".join(f"{kind} {statistics.fmean(k[kind] for k in known):.2f}" for kind in known[0])


def setting_of(run: dict) -> str:
    return json.dumps(run.get("extra") or {}, sort_keys=True)


def summarise(store: dict) -> str:
    """One table per (experiment, parent, extra overrides): runs from different parents (e.g. before
    and after a world rebuild) or budgets (`--set trainer.max_steps=...`) are never averaged together."""
    lines = ["# Reasoning-RL experiments (embedded world, held-out suites, mean and 95% CI over seeds)", ""]
    for key, parent in store.get("parents", {}).items():
        built = f" (built with `--cold-start {' '.join(f'{k}={v}' for k, v in parent['cold_start'].items())}`)" \
            if parent.get("cold_start") else ""
        metrics = renamed(parent)
        lines.append(f"Parent `{key}`{built}: " + ", ".join(f"{k} {metrics[k]:.3f}" for k in REPORTED + MORE if k in metrics)
                     + (f"; by kind {kinds_cell([parent['math_by_kind']])}" if "math_by_kind" in parent else ""))
    for experiment, arms in store.get("runs", {}).items():
        groups = sorted({(r.get("parent"), setting_of(r)) for runs in arms.values() for r in runs}, key=str)
        for parent_key, extra in groups:
            setting = "" if extra == "{}" else f", with `{extra}`"
            lines += ["", f"## {experiment} (parent `{parent_key}`{setting})", "",
                      "| arm | seeds | " + " | ".join(REPORTED + MORE) + " | wrong-length slope | generated tokens"
                      " | math by kind (mean over seeds) |",
                      "|---|---|" + "---|" * (len(REPORTED + MORE) + 3)]
            for arm, all_runs in arms.items():
                runs = [r for r in all_runs if (r.get("parent"), setting_of(r)) == (parent_key, extra)]
                if not runs:
                    continue
                cells = []
                for key in REPORTED + MORE:
                    values = [m[key] for m in (renamed(r["metrics"]) for r in runs) if key in m]
                    if not values:
                        cells.append("–")
                        continue
                    mean, low, high = t_interval(values)
                    cell = f"{mean:.3f} [{low:.3f}, {high:.3f}]" if not math.isnan(low) else f"{mean:.3f}"
                    cells.append(cell + (f" ({len(values)} seeds)" if len(values) < len(runs) else ""))
                slopes = [r["wrong_length_slope"] for r in runs if r.get("wrong_length_slope") is not None]
                slope = f"{statistics.fmean(slopes):+.3f}" if slopes else "–"
                tokens = [r["generated_tokens"] for r in runs if r.get("generated_tokens")]
                budget = f"{statistics.fmean(tokens):,.0f}" if tokens else "–"
                lines.append(f"| {arm} | {len(runs)} | " + " | ".join(cells) + f" | {slope} | {budget} | "
                             + kinds_cell([r.get("math_by_kind") for r in runs]) + " |")
    return "\n".join(lines) + "\n"


def plot_curves(runs_by_arm: dict[str, list[dict]], title: str, path: Path):
    """Completion length, correctness reward (both smoothed over 10 steps) and the held-out probe
    during training, one colour per arm, one line per seed, saved to `path`. Returns the figure,
    or None when no run has curves."""
    if not any(r.get("training_curve") for runs in runs_by_arm.values() for r in runs):
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def smooth(values: list[float], window: int = 10) -> list[float]:
        return [statistics.fmean(values[max(0, i - window + 1):i + 1]) for i in range(len(values))]

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for colour, (arm, runs) in enumerate(runs_by_arm.items()):
        for n, run in enumerate(r for r in runs if r.get("training_curve")):
            steps, lengths, correct = zip(*run["training_curve"])
            label = arm if n == 0 else None
            axes[0].plot(steps, smooth(list(lengths)), color=f"C{colour}", alpha=0.8, label=label)
            axes[1].plot(steps, smooth(list(correct)), color=f"C{colour}", alpha=0.8, label=label)
            if run.get("heldout_curve"):
                axes[2].plot(*zip(*run["heldout_curve"]), color=f"C{colour}", marker="o", alpha=0.8, label=label)
    for ax, ylabel in zip(axes, ["mean completion length (tokens)", "correctness reward (sampled)",
                                 "held-out math (probe, greedy, 100 items)"]):
        ax.set_xlabel("RL step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig


# YAML 1.1 (PyYAML) reads "1e-4" as a string: the config would still validate it, but the
# recorded settings would show a string and no longer match the same setting written "0.0001".
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def parse_assignments(items: list[str]) -> dict:
    import yaml

    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"expected KEY=VALUE, got {item!r}")
        parsed = yaml.safe_load(value)
        pairs[key] = float(parsed) if isinstance(parsed, str) and NUMBER.fullmatch(parsed) else parsed
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/default.yaml")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--parent", type=Path, help="cold-start checkpoint every arm starts from")
    source.add_argument("--cold-start", action="append", metavar="KEY=VALUE",
                        help="train the parent from the base on a cold-start variant (mixed_language_share, "
                             "double_check_share, answer_only_share) or with a stages.cold_start_sft override")
    parser.add_argument("--experiment", choices=sorted(EXPERIMENTS), required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for every arm and the parent's evaluation, a full dotted path "
                             "(stages.reasoning_rl.trainer.max_steps=240, evaluation.max_new_tokens=256)")
    parser.add_argument("--arms", nargs="+", help="run only these arms of the experiment")
    parser.add_argument("--redo", action="store_true",
                        help="train and evaluate again the (arm, seed) runs already recorded, replacing their "
                             "records (e.g. to measure metrics added since)")
    args = parser.parse_args()
    extra, cold_start = parse_assignments(args.set), parse_assignments(args.cold_start or [])
    parent_path = args.parent or build_parent(args.config, cold_start, extra).relative_to(Path.cwd())
    store = json.loads(STORE.read_text()) if STORE.exists() else {"parents": {}, "runs": {}}
    parent = CheckpointRef(path=str(parent_path.absolute()), digest=directory_digest(parent_path))
    parent_key = f"{parent_path} ({parent.digest[:12]})"
    parent_cfg = arm_config(args.config, {}, extra)
    known = store["parents"].get(parent_key, {})
    if parent_key not in store["parents"] or any(k not in renamed(known) for k in MORE):
        data = prepared_data(parent_cfg, ("reasoning_rl",))
        model, tokenizer = load_checkpoint(parent, for_training=False, settings=parent_cfg.base.settings())
        if parent_key not in store["parents"]:
            known = store["parents"][parent_key] = measured(parent, parent_cfg, data, "evaluating parent", model, tokenizer)
        else:
            known.update(more_math_metrics(model, tokenizer, parent_cfg, math_rows(data)))
    if cold_start:
        known["cold_start"] = cold_start
    done = {}  # (config hash, seed, parent) -> record, over every experiment already run
    for arms in store["runs"].values():
        for records in arms.values():
            for r in records:
                key = stage_config_hash(args.config, r["overrides"], r.get("extra", {}))
                done[(key, r["seed"], r.get("parent"))] = r
    for arm, overrides in EXPERIMENTS[args.experiment].items():
        if args.arms and arm not in args.arms:
            continue
        runs = store["runs"].setdefault(args.experiment, {}).setdefault(arm, [])
        key = stage_config_hash(args.config, overrides, extra)
        for seed in args.seeds:
            recorded = [r for r in runs if r["seed"] == seed and r.get("parent") == parent_key and r.get("extra") == extra]
            if recorded and not args.redo:
                continue
            if overrides.get(RS_SFT_ARM):
                rl_run = done.get((stage_config_hash(args.config, {}, extra), seed, parent_key))
                if rl_run is None or not rl_run.get("generated_tokens"):
                    raise SystemExit(f"rs_sft seed {seed} matches the token budget of the default RL run with "
                                     f"the same seed and parent: run `--experiment equal_budget --arms rl` first")
                same, record = None, run_rs_sft_arm(args.config, parent, seed, extra, rl_run["generated_tokens"])
            else:
                same = None if args.redo else done.get((key, seed, parent_key))
                record = dict(same, reused=True) if same else run_arm(args.config, parent, overrides, seed, extra)
            record.pop("parent", None)
            record.pop("extra", None)
            for old in recorded:
                runs.remove(old)
            runs.append({**record, "overrides": overrides, "parent": parent_key, "extra": extra})
            done[(key, seed, parent_key)] = runs[-1]
            RESULTS.mkdir(exist_ok=True)
            STORE.write_text(json.dumps(store, indent=2))
            (RESULTS / "rl_experiments.md").write_text(summarise(store))
            print(f"{args.experiment}/{arm} seed {seed}{' (reused)' if same else ''}: {json.dumps(record['metrics'])}")
    (RESULTS / "rl_experiments.md").write_text(summarise(store))
    group = {arm: [r for r in runs if r.get("parent") == parent_key and r.get("extra") == extra]
             for arm, runs in store["runs"][args.experiment].items()}
    group_id = hashlib.sha256(json.dumps([parent_key, extra], sort_keys=True).encode()).hexdigest()[:10]
    name = f"{args.experiment}-{group_id}"
    if plot_curves(group, f"{args.experiment}, parent {parent_key}, {json.dumps(extra)}", CURVES / f"{name}.png"):
        print(f"training curves: {CURVES / name}.png")


if __name__ == "__main__":
    main()
