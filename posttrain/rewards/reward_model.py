"""Reward models (DeepSeek-R1 sec. 2.3.4; Qwen3 sec. 4.4, the model-based reward without a reference
answer): a scalar head on a language model (AutoModelForSequenceClassification, `num_labels=1`)
trained on the `preferences` role with TRL's RewardTrainer, or brought by the user, then scored as
a plain GRPO reward function.

A conversation is rendered exactly as RewardTrainer renders one side of a pair (TRL's explicit-prompt
form: the prompt followed by the completion; `apply_chat_template(tokenize=True)` for conversational
rows, the text plus EOS for standard ones), with the reward model's own tokenizer and chat template:
a reply scored during RL gets the score the trained head gives the same conversation in training
and in `pair_metrics`. A rendering longer than `max_length` keeps its last `max_length` tokens (the
head reads the last token; RewardTrainer drops such pairs from training).
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from posttrain.rewards.model_based import REWARD_MODEL_VERSION  # noqa: F401 (the reward's version, with the reward)


def side(row: dict, which: str):
    """One side of a preference row as RewardTrainer tokenises it: prompt + completion."""
    return row["prompt"] + row[which]


def render(tokenizer, sequence) -> list[int]:
    """Token ids of a conversation (a list of messages) or a text, as RewardTrainer makes them."""
    if isinstance(sequence, list):
        return list(tokenizer.apply_chat_template(sequence, tokenize=True, return_dict=True, tools=None)["input_ids"])
    if tokenizer.eos_token and not sequence.endswith(tokenizer.eos_token):
        sequence += tokenizer.eos_token
    return list(tokenizer(text=sequence)["input_ids"])


class RewardModelScorer:
    """A sequence-classification reward model scoring conversations in batches (no gradients)."""

    def __init__(self, location: str | Path, *, batch_size: int = 16, max_length: int = 512):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.location = str(location)
        self.tokenizer = AutoTokenizer.from_pretrained(self.location)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForSequenceClassification.from_pretrained(self.location, num_labels=1)
        self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.model.eval()
        self.batch_size, self.max_length = batch_size, max_length

    def score_ids(self, sequences: list[list[int]]) -> list[float]:
        import torch

        ids = [s[-self.max_length:] for s in sequences]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = [0.0] * len(ids)
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            width = max(len(ids[i]) for i in chunk)
            input_ids = torch.tensor([ids[i] + [pad] * (width - len(ids[i])) for i in chunk])
            mask = torch.tensor([[1] * len(ids[i]) + [0] * (width - len(ids[i])) for i in chunk])
            with torch.no_grad():
                logits = self.model(input_ids=input_ids, attention_mask=mask).logits[:, 0].float()
            for i, value in zip(chunk, logits.tolist()):
                out[i] = value
        return out

    def scores(self, sequences: list) -> list[float]:
        return self.score_ids([render(self.tokenizer, s) for s in sequences])


def prompt_key(row: dict) -> str:
    return hashlib.sha256(json.dumps(row["prompt"], sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def split_pairs(rows: list[dict], held_out: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(training, held-out) pairs, split by prompt: every pair of one prompt falls on one side, so the
    held-out accuracy is measured on prompts the model never saw ranked."""
    def bucket(row: dict) -> float:
        digest = hashlib.sha256(f"{seed}/{prompt_key(row)}".encode()).hexdigest()
        return int(digest[:8], 16) / 0xFFFFFFFF

    train = [r for r in rows if bucket(r) >= held_out]
    held = [r for r in rows if bucket(r) < held_out]
    return train, held


def _pearson(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    return 0.0 if sx == 0 or sy == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sx * sy)


def pair_metrics(scorer: RewardModelScorer, rows: list[dict]) -> dict[str, float]:
    """Held-out pairwise accuracy (a tie counts half), the mean margin score(chosen) - score(rejected),
    how the score follows length (Pearson over every reply's score and token count), the accuracy on
    pairs whose chosen reply is the shorter one (a length-biased model falls there), and, where the
    rows carry `score_chosen` / `score_rejected`, how the model's margins follow the data's."""
    if not rows:
        return {}
    chosen_ids = [render(scorer.tokenizer, side(r, "chosen")) for r in rows]
    rejected_ids = [render(scorer.tokenizer, side(r, "rejected")) for r in rows]
    chosen, rejected = scorer.score_ids(chosen_ids), scorer.score_ids(rejected_ids)
    wins = [1.0 if c > r else 0.5 if c == r else 0.0 for c, r in zip(chosen, rejected)]
    shorter = [w for w, c, r in zip(wins, chosen_ids, rejected_ids) if len(c) < len(r)]
    lengths = [float(len(s)) for s in chosen_ids + rejected_ids]
    metrics = {"pairwise_accuracy": sum(wins) / len(wins),
               "mean_margin": sum(c - r for c, r in zip(chosen, rejected)) / len(rows),
               "length_correlation": _pearson(chosen + rejected, lengths),
               "held_out_pairs": float(len(rows)),
               "shorter_chosen_pairs": float(len(shorter))}
    if shorter:
        metrics["accuracy_shorter_chosen"] = sum(shorter) / len(shorter)
    given = [(r["score_chosen"] - r["score_rejected"], c - j) for r, c, j in zip(rows, chosen, rejected)
             if r.get("score_chosen") is not None and r.get("score_rejected") is not None]
    if len(given) > 1:
        metrics["margin_correlation"] = _pearson([g for g, _ in given], [m for _, m in given])
    return metrics
