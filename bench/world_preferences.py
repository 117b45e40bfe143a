"""The embedded world's preference pairs and open-ended kind, measured.

- **Baselines** on the held-out pairs (split by prompt as the reward model stage splits them): a
  length-only model (the longer reply wins) and a bag-of-tokens model (a linear score on token counts,
  fitted to the training pairs with the pairwise logistic loss RewardTrainer uses). A tie counts half.
  Both should sit at chance: the two replies of a pair have the same length and the same characters.
- **Length match**: the largest relative length difference within a pair (the issue asks for <= 10%).
- With `--run runs/<run>`: the open suite's independent check at each stage of that run (mode fusion
  must fail it on >= 50% of the held-out prompts), the reward model stage's held-out metrics, and
  what the trained reward model pays beside the truth: on held-out prompts, the true equation against
  the swapped one and against a wrong result of the right size (`a + b = c + 10`), which tells whether
  it learnt the relation or a shortcut ("the last number is the largest").

    .venv/bin/python bench/world_preferences.py [--run runs/<run>] [--slips <checkpoint> ...]

With `--slips`, each checkpoint's greedy replies to the held-out open prompts counted by what their
equation does wrong (`slip`): whether the policy's errors are the swap the pairs teach.

Writes bench/results/world_preferences.json and .md.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posttrain.data.files import read_jsonl  # noqa: E402
from posttrain.rewards.reward_model import split_pairs  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def _text(side) -> str:
    return side if isinstance(side, str) else "".join(m["content"] for m in side)


def pairwise_accuracy(chosen: list[float], rejected: list[float]) -> float:
    return float(np.mean([1.0 if c > r else 0.5 if c == r else 0.0 for c, r in zip(chosen, rejected)]))


def bag_of_tokens(train: list[dict], held: list[dict], steps: int = 300, lr: float = 0.5) -> float:
    """A linear score on character counts (the world's tokens), fitted with the pairwise logistic loss."""
    vocabulary = sorted({ch for row in train + held for side in ("chosen", "rejected") for ch in _text(row[side])})
    index = {ch: i for i, ch in enumerate(vocabulary)}

    def bag(text: str) -> np.ndarray:
        v = np.zeros(len(vocabulary))
        for ch, n in Counter(text).items():
            v[index[ch]] = n
        return v

    diff = np.stack([bag(_text(r["chosen"])) - bag(_text(r["rejected"])) for r in train])
    w = np.zeros(len(vocabulary))
    for _ in range(steps):
        margin = diff @ w
        w += lr * diff.T @ (1 / (1 + np.exp(margin))) / len(diff)
    return pairwise_accuracy([float(bag(_text(r["chosen"])) @ w) for r in held],
                             [float(bag(_text(r["rejected"])) @ w) for r in held])


def baselines(pairs: list[dict], held_out: float, seed: int) -> dict:
    train, held = split_pairs(pairs, held_out, seed)
    lengths = [(len(_text(r["chosen"])), len(_text(r["rejected"]))) for r in pairs]
    return {"pairs": len(pairs), "training_pairs": len(train), "held_out_pairs": len(held),
            "max_length_difference": max(abs(c - r) / max(c, r) for c, r in lengths),
            "same_characters": sum(sorted(_text(r["chosen"])) == sorted(_text(r["rejected"])) for r in pairs) / len(pairs),
            "length_baseline_accuracy": pairwise_accuracy([len(_text(r["chosen"])) for r in held],
                                                          [len(_text(r["rejected"])) for r in held]),
            "bag_of_tokens_accuracy": bag_of_tokens(train, held)}


def run_measures(run: Path, eval_rows: list[dict]) -> dict:
    from posttrain.rewards.reward_model import RewardModelScorer
    from posttrain.rewards.model_based import conversation_scores
    from posttrain.world.open_tasks import EquationTask

    report = json.loads((run / "report.json").read_text())
    stages = {s["name"]: s for s in report["stages"]}
    out = {"run": run.name, "open_accuracy": {name: (s.get("eval") or {}).get("open/accuracy")
                                              for name, s in stages.items()}}
    rm = stages.get("reward_model", {})
    out["reward_model_stage"] = {k: v for k, v in (rm.get("train_metrics") or {}).items()
                                 if k in ("pairwise_accuracy", "mean_margin", "length_correlation", "held_out_pairs")}
    location = run / "reward_model" / "reward_model"
    if location.is_dir():
        scorer = RewardModelScorer(location)
        rows = []
        for row in eval_rows:
            a, b = (int(x) for x in row["prompt"].replace("。", " ").split() if x.isdigit())
            task = EquationTask(row["id"], row["language"], a, b, row["prompt"], _reasoning(a, b, row["language"]))
            rows.append((row["prompt"], task))
        replies = {"true": [t.reply(t.true_equation) for _, t in rows],
                   "swapped": [t.reply(t.swapped_equation) for _, t in rows],
                   "wrong_result_plus_10": [t.reply(f"{t.a} + {t.b} = {t.a + t.b + 10}") for _, t in rows]}
        scores = {k: conversation_scores(scorer, [p for p, _ in rows], v) for k, v in replies.items()}
        out["reward_model_pays"] = {f"true_over_{k}": pairwise_accuracy(scores["true"], v)
                                    for k, v in scores.items() if k != "true"}
    return out


SLIPS = ("true", "swapped", "swap_shaped", "true_but_operands_miscopied", "wrong_result", "sum_shaped", "other",
         "no_equation")


def slip(a: int, b: int, answer: str) -> str:
    """What the last equation of an answer does with `a + b`: true; the swap the pairs teach (exactly,
    or its shape: the last number below the second); a true sum of miscopied operands; the right
    operands with a wrong result; a result near the sum (a miscopied digit); anything else."""
    found = re.findall(r"(\d+)\s*\+\s*(\d+)\s*=\s*(\d+)", answer)
    if not found:
        return "no_equation"
    p, q, r = map(int, found[-1])
    if (p, q, r) == (a, b, a + b):
        return "true"
    if (p, q, r) == (a, a + b, b):
        return "swapped"
    if r < q:
        return "swap_shaped"
    if p + q == r:
        return "true_but_operands_miscopied"
    if (p, q) == (a, b):
        return "wrong_result"
    return "sum_shaped" if abs(r - (p + q)) <= 0.2 * (p + q) else "other"


def slips(checkpoint: Path, eval_rows: list[dict]) -> dict[str, int]:
    """The greedy replies of `checkpoint` to the held-out open suite (think mode, as evaluated), by slip."""
    from posttrain.chat import parse_response
    from posttrain.config.loading import load_config
    from posttrain.generation.engines import generate_replies, load_generator

    cfg = load_config(ROOT / "configs" / "default.yaml")
    model, tokenizer = load_generator(checkpoint, cfg.base.settings(), cfg.evaluation)
    replies = generate_replies(model, tokenizer, cfg.base.settings().chat,
                               [([{"role": "user", "content": r["prompt"]}], True) for r in eval_rows],
                               max_new_tokens=cfg.evaluation.max_new_tokens, batch_size=cfg.evaluation.batch_size)
    counts = Counter()
    for row, (reply,) in zip(eval_rows, replies):
        a, b = (int(x) for x in re.findall(r"\d+", row["prompt"])[:2])
        counts[slip(a, b, parse_response(reply.text).answer or reply.text)] += 1
    return {name: counts[name] for name in SLIPS}


def _reasoning(a: int, b: int, language: str) -> str:
    from posttrain.world.tasks import render_reasoning

    return render_reasoning("+", a, b, language)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", default=str(ROOT / "data" / "world"))
    parser.add_argument("--run", help="a finished run folder (runs/<id>) to read the open suite's check from")
    parser.add_argument("--held-out", type=float, default=0.1)
    parser.add_argument("--slips", nargs="*", default=[], metavar="CHECKPOINT",
                        help="checkpoints whose held-out open replies to count by slip")
    args = parser.parse_args()
    world = Path(args.world)
    result = {"baselines": baselines(read_jsonl(world / "preferences.jsonl"), args.held_out, 0)}
    if args.run:
        result.update(run_measures(Path(args.run), read_jsonl(world / "eval_open.jsonl")))
    if args.slips:
        result["slips"] = {c: slips(Path(c), read_jsonl(world / "eval_open.jsonl")) for c in args.slips}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "world_preferences.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
