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
import tempfile
import time
from pathlib import Path

from posttrain.env import configure_offline

configure_offline()

from posttrain.checkpoint import directory_digest, load_checkpoint  # noqa: E402
from posttrain.config import load_config  # noqa: E402
from posttrain.evaluation import evaluate, math_by_kind, math_generations  # noqa: E402
from posttrain.schema import CheckpointRef, StageInputs  # noqa: E402

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
REPORTED = ["math_accuracy", "mixed_language_rate", "language_consistency", "mean_len_correct", "mean_len_wrong",
            "format_rate", "truncation_rate"]
# Held-out math measured by more_math_metrics; runs recorded before it existed show "–".
MORE = ["math_training_phrasing", "math_sampled_pass1", "math_answer_only_rate"]


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


def arm_config(config_path: str, overrides: dict, extra: dict, stage: str = "reasoning_rl"):
    """The pipeline config of an arm: `extra` holds full dotted paths (`--set`, the same for every
    arm, e.g. `evaluation.max_new_tokens`), the arm's overrides are inside stages.<stage>."""
    return load_config(config_path, overrides={**extra, **{f"stages.{stage}.{k}": v for k, v in overrides.items()}})


def stage_config_hash(config_path: str, overrides: dict, extra: dict) -> str:
    """Identity of what an arm trains and is evaluated with, so an arm equal to another (e.g.
    language reward "on" is the default) reuses that arm's runs instead of training them again."""
    if overrides.get(RS_SFT_ARM):
        return f"{RS_SFT_ARM}:{stage_config_hash(config_path, {}, extra)}:{json.dumps(RS_SFT, sort_keys=True)}"
    cfg = arm_config(config_path, overrides, extra)
    identity = {"stage": cfg.stage("reasoning_rl").model_dump(mode="json"),
                "evaluation": cfg.evaluation.model_dump(mode="json")}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def build_parent(config_path: str, cold_start: dict, extra: dict) -> Path:
    """A cold-start checkpoint trained from the config's base with `cold_start` overrides inside
    stages.cold_start_sft (e.g. double_check_share=0.5), kept under bench/parents/ for reuse."""
    from posttrain.world.build import base_checkpoint
    from stages import cold_start_sft

    cfg = arm_config(config_path, cold_start, extra, stage="cold_start_sft")
    base = base_checkpoint(cfg, "teacher")
    # Fields left at their defaults stay out, so a field added later does not orphan built parents.
    identity = {"stage": cfg.stage("cold_start_sft").model_dump(mode="json", exclude_defaults=True),
                "base": base.digest, "seed": cfg.seed, "version": cold_start_sft.STAGE_VERSION}
    work = PARENTS / hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    if not (work / "checkpoint" / "config.json").exists():
        cold_start_sft.run(cfg.stage("cold_start_sft"), StageInputs(
            work_dir=str(work), world_dir=str(cfg.path(cfg.paths.world)), parent=base, seed=cfg.seed))
        (work / "identity.json").write_text(json.dumps(identity, indent=2))
    return work / "checkpoint"


# R1's pass@1: the mean correctness of k samples at temperature 0.6, top-p 0.95 (DeepSeek-R1, section 3.1).
SAMPLED_PASS1 = {"samples": 4, "temperature": 0.6, "top_p": 0.95}


def more_math_metrics(model, tokenizer, cfg) -> dict[str, float]:
    """Held-out math beyond the greedy suite score: the same problems asked with training
    phrasings (greedy), R1's sampled pass@1 on the suite, and the share of those samples that
    state the result without the working (reflection.answer_only). Greedy hides a policy that has become
    more reliable when sampled; the suite's unseen phrasings hide a gain on unseen problems."""
    from posttrain.rewards.math_verifier import verify_math
    from posttrain.world.build import WorldPaths, read_jsonl
    from posttrain.world.reflection import is_answer_only
    from posttrain.world.rephrase import with_training_phrasing

    rows = read_jsonl(WorldPaths(cfg.path(cfg.paths.world)).file("eval_math"),
                      ("question", "answer", "language", "op", "a", "b"))

    def score(outputs) -> float:
        return statistics.fmean(statistics.fmean(verify_math(g.text, r["answer"]).reward for g in group)
                                for group, r in zip(outputs, rows, strict=True))

    rephrased = math_generations(model, tokenizer, cfg, with_training_phrasing(rows),
                                 desc="held-out problems, training phrasings")
    sampled = math_generations(model, tokenizer, cfg, [r["question"] for r in rows], do_sample=True,
                               temperature=SAMPLED_PASS1["temperature"], top_p=SAMPLED_PASS1["top_p"],
                               num_samples=SAMPLED_PASS1["samples"], desc="sampled pass@1")
    return {"math_training_phrasing": score(rephrased), "math_sampled_pass1": score(sampled),
            "math_answer_only_rate": statistics.fmean(is_answer_only(g.text) for group in sampled for g in group)}


def training_curve(log: list[dict]) -> list[list[float]]:
    """(step, mean completion length, mean correctness reward) per logged step: R1's figure of
    response length and accuracy growing together, when RL learns to work problems out."""
    return [[row["step"], row["completions/mean_length"], row["rewards/correctness/mean"]] for row in log
            if "completions/mean_length" in row and "rewards/correctness/mean" in row]


def generated_tokens(log: list[dict], completions_per_step: int) -> int:
    """Completion tokens RL generated: mean completion length x completions, over logged steps."""
    return round(sum(row["completions/mean_length"] * completions_per_step
                     for row in log if "completions/mean_length" in row))


def run_arm(config_path: str, parent: CheckpointRef, overrides: dict, seed: int, extra: dict) -> dict:
    from stages import reasoning_rl

    cfg = arm_config(config_path, overrides, extra)
    stage = cfg.stage("reasoning_rl")
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        result = reasoning_rl.run(stage, StageInputs(
            work_dir=tmp, world_dir=str(cfg.path(cfg.paths.world)), parent=parent, seed=seed))
        model, tokenizer = load_checkpoint(result.checkpoint, for_training=False)
        after = evaluate(result.checkpoint, cfg, model=model, tokenizer=tokenizer, desc=f"evaluating seed {seed}")
        more = more_math_metrics(model, tokenizer, cfg)
    per_step = stage.trainer.prompts_per_step * stage.trainer.num_generations
    return {"seed": seed, "overrides": overrides, "wall_s": time.time() - started,
            "metrics": {**{k: after.metrics[k] for k in REPORTED}, **more},
            "math_by_kind": math_by_kind(cfg.path(cfg.paths.world), after.per_item["math_accuracy"]),
            "wrong_length_slope": wrong_length_slope(result.train_log),
            "generated_tokens": generated_tokens(result.train_log, per_step),
            "heldout_curve": [[row["step"], row["heldout/math_accuracy"]] for row in result.train_log
                              if "heldout/math_accuracy" in row],
            "training_curve": training_curve(result.train_log)}


def run_rs_sft_arm(config_path: str, parent: CheckpointRef, seed: int, extra: dict, budget: int) -> dict:
    """Rejection-sampling SFT on `budget` generated tokens, from the RL stage's prompts and sampling."""
    import random

    import torch
    from datasets import Dataset
    from trl import SFTTrainer

    from posttrain.chat import conversation, user_turn
    from posttrain.checkpoint import save_checkpoint
    from posttrain.config import SFTTrainerConfig
    from posttrain.generation import generate, render_chat_prompts
    from posttrain.trainers import sft_args
    from stages.reasoning_rl import training_problems
    from stages.rejection_sampling import rejection_reason

    cfg = arm_config(config_path, {}, extra)
    stage = cfg.stage("reasoning_rl")
    started = time.time()
    torch.set_num_threads(stage.trainer.threads)
    model, tokenizer = load_checkpoint(parent)
    problems = training_problems(stage, cfg.path(cfg.paths.world))
    random.Random(seed).shuffle(problems)
    group, spent, rows, sampled, chunk = stage.trainer.num_generations, 0, [], 0, 8
    while spent < budget and sampled < len(problems):
        batch = problems[sampled:sampled + chunk]
        sampled += len(batch)
        prompts = render_chat_prompts(tokenizer, [[user_turn(p["question"], True)] for p in batch])
        outputs = generate(model, tokenizer, prompts, max_new_tokens=stage.trainer.max_completion_length,
                           do_sample=True, temperature=stage.trainer.temperature, num_samples=group,
                           seed=seed * 100_003 + sampled, desc=f"rs-sft sampling {spent}/{budget} tokens")
        for problem, responses in zip(batch, outputs):
            spent += sum(r.num_tokens for r in responses)
            kept = {" ".join(r.text.split()): r.text for r in responses
                    if rejection_reason(r, problem["answer"], problem["language"], 1.0) is None}
            rows += [{"messages": conversation(problem["question"], text, thinking=True)}
                     for text in list(kept.values())[:RS_SFT["max_per_prompt"]]]
    trainer_cfg = SFTTrainerConfig(learning_rate=RS_SFT["learning_rate"], epochs=RS_SFT["epochs"],
                                   threads=stage.trainer.threads)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = SFTTrainer(model=model, args=sft_args(trainer_cfg, Path(tmp) / "trainer", seed),
                             train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
        trainer.train()
        checkpoint = save_checkpoint(trainer.model, tokenizer, Path(tmp) / "checkpoint")
        tuned, tokenizer = load_checkpoint(checkpoint, for_training=False)
        after = evaluate(checkpoint, cfg, model=tuned, tokenizer=tokenizer, desc=f"evaluating rs-sft seed {seed}")
        more = more_math_metrics(tuned, tokenizer, cfg)
    return {"seed": seed, "wall_s": time.time() - started,
            "metrics": {**{k: after.metrics[k] for k in REPORTED}, **more},
            "math_by_kind": math_by_kind(cfg.path(cfg.paths.world), after.per_item["math_accuracy"]),
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
        lines.append(f"Parent `{key}`{built}: " + ", ".join(f"{k} {parent[k]:.3f}" for k in REPORTED + MORE if k in parent)
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
                    values = [r["metrics"][key] for r in runs if key in r["metrics"]]
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
                        help="train the parent from the base with this stages.cold_start_sft override")
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
    if parent_key not in store["parents"] or any(k not in known for k in MORE):
        model, tokenizer = load_checkpoint(parent, for_training=False)
        if parent_key not in store["parents"]:
            parent_eval = evaluate(parent, parent_cfg, model=model, tokenizer=tokenizer, desc="evaluating parent")
            known = store["parents"][parent_key] = {**parent_eval.metrics, "math_by_kind": math_by_kind(
                parent_cfg.path(parent_cfg.paths.world), parent_eval.per_item["math_accuracy"])}
        known.update(more_math_metrics(model, tokenizer, parent_cfg))
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
