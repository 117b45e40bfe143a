"""Evaluation-style generation: our sampling loop (posttrain/generation/engines.py) against transformers'
`model.generate` as the project used it before (left-padded batches of 64, DynamicCache), on the
held-out suites of a pipeline config, greedy, interleaved in one process so both see the same
machine load. Checks that both give the same replies token for token.

    python bench/generation.py --checkpoint runs/<run>/general_rl/checkpoint [--reps 3]

Results go to bench/results/generation.json and .md.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from posttrain.env import configure_offline

configure_offline()

import torch  # noqa: E402

from posttrain import generation  # noqa: E402
from posttrain.chat import render_prompt  # noqa: E402
from posttrain.registry.checkpoint import load_checkpoint  # noqa: E402
from posttrain.config.loading import load_config  # noqa: E402
from posttrain.evaluation.suites import row_mode, suite_rows  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


@torch.inference_mode()
def transformers_generate(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int) -> list[list[int]]:
    """The previous loop: `model.generate` on length-sorted, left-padded batches, greedy."""
    tokenizer.padding_side = "left"
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: list[list[int]] = [[] for _ in prompts]
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        enc = tokenizer([prompts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False)
        ids = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, top_k=None,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        for i, row in zip(idx, ids[:, enc["input_ids"].shape[1]:].tolist()):
            out[i] = row[:row.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in row else row
    return out


def ours(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int) -> list[list[int]]:
    tokenizer.padding_side = "left"
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    stop = generation._stop_ids(model, tokenizer)
    out: list[list[int]] = [[] for _ in prompts]
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        enc = tokenizer([prompts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            pick = generation.TokenPicker(model, enc["input_ids"], None, do_sample=False, top_k=None,
                                          max_new_tokens=max_new_tokens)
            rows = generation.decode(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=max_new_tokens,
                                     stop_ids=stop, pick=pick)
        for i, row in zip(idx, rows):
            out[i] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    cfg = load_config(args.config)
    torch.set_num_threads(cfg.evaluation.threads)
    settings = cfg.base.settings()
    model, tokenizer = load_checkpoint(args.checkpoint, for_training=False, settings=settings)
    model.eval()
    rows = suite_rows(cfg, None)
    prompts = [render_prompt(tokenizer, settings.chat, r["prompt"], row_mode(s, r))[0]
               for s in cfg.data.suites() if s.sampling.samples == 1 for r in rows[s.name]]
    budget = cfg.evaluation.max_new_tokens
    arms = {"transformers generate, batch 64": lambda: transformers_generate(model, tokenizer, prompts, budget, 64),
            "ours, batch 64": lambda: ours(model, tokenizer, prompts, budget, 64),
            "ours, batch 128": lambda: ours(model, tokenizer, prompts, budget, 128)}
    times: dict[str, list[float]] = {name: [] for name in arms}
    replies: dict[str, list[list[int]]] = {}
    for rep in range(args.reps):
        for name, run in arms.items():
            start = time.perf_counter()
            replies[name] = run()
            times[name].append(time.perf_counter() - start)
            print(f"rep {rep}: {name}: {times[name][-1]:.1f} s", flush=True)
    reference = replies["transformers generate, batch 64"]
    tokens = sum(len(r) for r in reference)
    result = {
        "recorded": time.strftime("%Y-%m-%d %H:%M"), "machine": platform.processor() or platform.machine(),
        "checkpoint": args.checkpoint, "prompts": len(prompts), "max_new_tokens": budget, "completion_tokens": tokens,
        "arms": {name: {"seconds": t, "median_s": statistics.median(t),
                        "identical_replies": sum(a == b for a, b in zip(replies[name], reference))}
                 for name, t in times.items()},
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "generation.json").write_text(json.dumps(result, indent=2))
    base = result["arms"]["transformers generate, batch 64"]["median_s"]
    lines = [f"# Generation: our loop vs transformers `generate` ({result['recorded']})", "",
             f"{len(prompts)} greedy prompts of `{args.config}`'s suites, up to {budget} new tokens, "
             f"{tokens} completion tokens; checkpoint `{args.checkpoint}`; {args.reps} interleaved repetitions, "
             f"{cfg.evaluation.threads} threads.", "",
             "| arm | median s | runs (s) | speed-up | replies identical to generate's |", "|---|---|---|---|---|"]
    for name, arm in result["arms"].items():
        lines.append(f"| {name} | {arm['median_s']:.1f} | {', '.join(f'{t:.1f}' for t in arm['seconds'])} | "
                     f"{base / arm['median_s']:.2f}x | {arm['identical_replies']} of {len(prompts)} |")
    (RESULTS / "generation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
