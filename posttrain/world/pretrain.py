"""Pretraining of the embedded base models on the world corpus (a plain causal-LM loop)."""
from __future__ import annotations

import math
import re
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from posttrain.registry.checkpoint import save_checkpoint
from posttrain.config.embedded import PretrainConfig  # noqa: F401 (re-exported)
from posttrain.schema import CheckpointRef
from posttrain.world import corpus, tasks
from posttrain.world.model import Architecture, build_model, count_parameters


def pack(tokenizer, documents: list[str], sequence_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Whole documents packed into blocks, each block starting at a document boundary.

    Cutting documents at arbitrary block edges would leave many solutions without their question,
    and copying operands from the question is the first thing the model has to learn.
    Returns (input_ids, labels) with padding masked out of the loss.
    """
    sep = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    pad = tokenizer.pad_token_id
    blocks, current = [], []
    for enc in tokenizer(documents, add_special_tokens=False)["input_ids"]:
        doc = (enc + [sep])[:sequence_length]
        if len(current) + len(doc) > sequence_length:
            blocks.append(current)
            current = []
        current = current + doc
    if current:
        blocks.append(current)
    ids = torch.full((len(blocks), sequence_length), pad)
    labels = torch.full((len(blocks), sequence_length), -100)
    for i, block in enumerate(blocks):
        ids[i, :len(block)] = torch.tensor(block)
        labels[i, :len(block)] = torch.tensor(block)
    return ids, labels


def pretrain(tokenizer, arch: Architecture, corpus_cfg: corpus.CorpusConfig, cfg: PretrainConfig,
             out_dir: Path, seed: int) -> tuple[CheckpointRef, dict]:
    torch.set_num_threads(cfg.threads)
    model = build_model(arch, tokenizer, seed)
    blocks, block_labels = pack(tokenizer, corpus.build_corpus(corpus_cfg, seed), cfg.sequence_length)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay,
                                  betas=(0.9, 0.95))

    def lr_at(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    start, losses, curve = time.time(), [], []
    bar = tqdm(range(cfg.steps), desc=f"pretraining {count_parameters(model) / 1e6:.1f}M", unit="step")
    for step in bar:
        pick = torch.randint(len(blocks), (cfg.batch_size,), generator=generator)
        loss = model(input_ids=blocks[pick], labels=block_labels[pick]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % 10 == 0:
            bar.set_postfix(loss=f"{sum(losses[-10:]) / len(losses[-10:]):.3f}")
        if cfg.probe_every and (step + 1) % cfg.probe_every == 0 and step + 1 < cfg.steps:
            curve.append({"step": step + 1, "raw_math_accuracy": probe_raw_math(model, tokenizer, cfg.probe_problems, seed, corpus_cfg.levels)})
            model.train()
            bar.write(f"step {step + 1}: held-out raw math accuracy {curve[-1]['raw_math_accuracy']:.3f}")
    wall = time.time() - start
    ref = save_checkpoint(model, tokenizer, out_dir)
    tokens = cfg.steps * cfg.batch_size * cfg.sequence_length  # padded positions included
    metrics = {"final_loss": sum(losses[-20:]) / len(losses[-20:]), "wall_s": wall,
               "tokens_per_s": tokens / wall, "parameters": count_parameters(model),
               "raw_math_accuracy": probe_raw_math(model, tokenizer, cfg.probe_problems, seed, corpus_cfg.levels),
               "probe_curve": curve}
    return ref, metrics


_ANSWER_RE = re.compile(r"(?:Answer: |答案：)(-?\d+)")


def probe_raw_math(model, tokenizer, n: int, seed: int, levels: list[int]) -> float:
    """Held-out math accuracy in the corpus's own format: what the base knows before any chat."""
    from posttrain.generation.engines import generate

    problems = tasks.math_problems(n, seed + 1, "eval", levels=levels)
    prompts = [corpus.raw_prompt(p.question, p.language) for p in problems]
    outputs = generate(model, tokenizer, prompts, max_new_tokens=120, desc="probing base")
    correct = 0
    for p, (g,) in zip(problems, outputs):
        m = _ANSWER_RE.search(g.text)
        correct += bool(m and m.group(1) == p.answer)
    return correct / max(1, len(problems))
