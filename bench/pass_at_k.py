"""pass@k on the held-out math suite for one or more checkpoints: what a policy finds when it
samples k times, against what it finds first. RL with a verifiable reward reinforces the answers
its rollouts find, so pass@k at the rollout temperature shows what there is to reinforce (Yue et
al. 2025, "Does reinforcement learning really incentivize reasoning capacity in LLMs beyond the
base model?"); whether reinforcing it on training problems carries over to these is another
question (bench/results/rl_experiments_notes.md, experiment 1).

    python bench/pass_at_k.py --checkpoint "cold start=runs/<run>/cold_start_sft/checkpoint" \
        --checkpoint "reasoning RL=runs/<run>/reasoning_rl/checkpoint" --samples 16

Samples at the reasoning-RL rollout temperature (the config's, 1.0 by default), unbiased estimator
pass@k = 1 - C(n-c, k) / C(n, k) per problem (Chen et al. 2021), mean over problems; also per
problem group of the config's math suite (the world's: level and operation). Results: bench/results/pass_at_k.{json,md,png}, one record per name (a
repeated name replaces its record; the legend and tables say each record's samples and T).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from math import comb
from pathlib import Path

from posttrain.env import configure_offline

configure_offline()
sys.path.insert(0, str(Path(__file__).resolve().parent))   # the bench's own modules, however this is loaded

from stage_data import by_group, math_rows, thinking_replies  # noqa: E402

from posttrain.registry.checkpoint import directory_digest, load_checkpoint  # noqa: E402
from posttrain.config.loading import load_config  # noqa: E402
from posttrain.rewards import verify_row  # noqa: E402
from posttrain.schema import CheckpointRef  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
STORE = RESULTS / "pass_at_k.json"


def pass_at_k(samples: int, correct: int, k: int) -> float:
    """Chance that at least one of k samples drawn without replacement from `samples` is correct."""
    if samples - correct < k:
        return 1.0
    return 1.0 - comb(samples - correct, k) / comb(samples, k)


def ks_up_to(samples: int) -> list[int]:
    ks, k = [], 1
    while k <= samples:
        ks.append(k)
        k *= 2
    return ks


def measure(checkpoint: Path, cfg, samples: int, temperature: float, seed: int) -> dict:
    rows = math_rows(cfg)
    ref = CheckpointRef(path=str(checkpoint.absolute()), digest=directory_digest(checkpoint))
    model, tokenizer = load_checkpoint(ref, for_training=False, settings=cfg.base.settings())
    outputs = thinking_replies(model, tokenizer, cfg, [r["prompt"] for r in rows], do_sample=True,
                               temperature=temperature, num_samples=samples, seed=seed,
                               desc=f"{samples} samples a problem")
    correct = [sum(verify_row(g.text, r)[0] == 1.0 for g in group) for group, r in zip(outputs, rows, strict=True)]
    # Keys are strings, as they are once the record has been through JSON.
    per_k = {str(k): [pass_at_k(samples, c, k) for c in correct] for k in ks_up_to(samples)}
    overall = {k: statistics.fmean(scores) for k, scores in per_k.items()}
    kinds_per_k = {k: by_group(rows, scores) for k, scores in per_k.items()}
    by_kind = {kind: {k: kinds_per_k[k][kind] for k in per_k} for kind in next(iter(kinds_per_k.values()))}
    never = sum(c == 0 for c in correct) / len(correct)
    return {"checkpoint": str(checkpoint), "digest": ref.digest, "samples": samples,
            "temperature": temperature, "seed": seed, "pass_at_k": overall, "by_kind": by_kind,
            "never_solved": never, "correct_counts": correct}


def table(store: dict) -> str:
    lines = ["# pass@k on the held-out math suite (400 problems, unseen phrasings and operands)", "",
             "Sampled at the temperature shown, no top-p; `never` = share of problems no sample solved.", ""]
    for name, record in store.items():
        ks = list(record["pass_at_k"])
        lines += [f"## {name}", "", f"`{record['checkpoint']}` ({record['digest'][:19]}), "
                  f"{record['samples']} samples at T {record['temperature']}", "",
                  "| | " + " | ".join(f"pass@{k}" for k in ks) + " | never |",
                  "|---|" + "---|" * (len(ks) + 1),
                  "| all | " + " | ".join(f"{record['pass_at_k'][k]:.3f}" for k in ks)
                  + f" | {record['never_solved']:.3f} |"]
        for kind, values in record["by_kind"].items():
            lines.append(f"| {kind} | " + " | ".join(f"{values[k]:.3f}" for k in ks) + " | |")
        lines.append("")
    return "\n".join(lines)


def plot(store: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, record in store.items():
        ks = [int(k) for k in record["pass_at_k"]]
        ax.plot(ks, list(record["pass_at_k"].values()), marker="o",
                label=f"{name} ({record['samples']} samples, T {record['temperature']})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k (samples a problem)")
    ax.set_ylabel("held-out math pass@k")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--checkpoint", action="append", required=True, metavar="NAME=PATH")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=None,
                        help="default: the reasoning-RL rollout temperature of the config")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = load_config(args.config)
    temperature = cfg.stage("reasoning_rl").trainer.temperature if args.temperature is None else args.temperature
    if temperature <= 0:
        raise SystemExit(f"--temperature {temperature}: pass@k needs sampling, a temperature above 0")
    named = []
    for item in args.checkpoint:
        name, sep, path = item.partition("=")
        if not sep or not (Path(path) / "config.json").exists():
            raise SystemExit(f"--checkpoint {item!r}: expected NAME=PATH to a checkpoint directory "
                             f"(with config.json), e.g. 'cold start=runs/<run>/cold_start_sft/checkpoint'")
        named.append((name, Path(path)))
    store = json.loads(STORE.read_text()) if STORE.exists() else {}
    for name, path in named:
        store[name] = measure(path, cfg, args.samples, temperature, args.seed)
        print(f"{name}: " + ", ".join(f"pass@{k} {v:.3f}" for k, v in store[name]["pass_at_k"].items()))
        RESULTS.mkdir(exist_ok=True)
        STORE.write_text(json.dumps(store, indent=2))
        (RESULTS / "pass_at_k.md").write_text(table(store))
    plot(store, RESULTS / "pass_at_k.png")


if __name__ == "__main__":
    main()
