"""vLLM's CPU build against the hf loop, called as evaluation and rejection sampling call them.

    python scripts/install.py --engines cpu
    python bench/vllm_cpu.py --checkpoint runs/<run>/cold_start_sft/checkpoint \
        --world data/world --out bench/results/vllm_cpu

Wall per call with the engine start included (a stage loads its generator once per call site),
on the default config's settings: evaluation, greedy replies to the math suite (max_new_tokens and
batch size of `evaluation:`); rejection sampling, `samples_per_prompt` samples at its temperature.
Also greedy agreement (token-identical replies) and, for sampled calls, the math reward of both.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def _load_rows(path: Path, limit: int) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()][:limit]
    for row in rows:   # the world's files hold the question; prepared rows hold the conversation
        if isinstance(row["prompt"], str):
            row["prompt"] = [{"role": "user", "content": row["prompt"]}]
    return rows


def _widened(checkpoint: Path, hidden: int, layers: int) -> str:
    """A Qwen3 of `hidden` x `layers` (tests/userdata.py's builder) with the checkpoint's tokenizer
    and generation config, in a temporary folder."""
    import shutil
    import sys
    import tempfile

    from transformers import AutoTokenizer

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.userdata import build_model

    directory = Path(tempfile.mkdtemp(prefix=f"widened-{hidden}x{layers}-"))
    build_model(directory, AutoTokenizer.from_pretrained(checkpoint), hidden=hidden, layers=layers, seed=0)
    if (checkpoint / "generation_config.json").is_file():
        shutil.copy(checkpoint / "generation_config.json", directory)
    return str(directory)


def main() -> None:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--world", type=Path, required=True, help="the embedded world's data folder")
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--eval-rows", type=int, default=800)
    parser.add_argument("--rejection-rows", type=int, default=256)
    parser.add_argument("--out", type=Path, default=Path("bench/results/vllm_cpu"))
    parser.add_argument("--widen", type=int, nargs=2, metavar=("HIDDEN", "LAYERS"),
                        help="instead of the checkpoint, a Qwen3 of this width and depth with its tokenizer "
                             "(the tests' widened model shape; untrained: replies run to max_new_tokens)")
    args = parser.parse_args()
    if args.widen:
        args.checkpoint = _widened(Path(args.checkpoint), *args.widen)

    import torch

    from posttrain.config.loading import load_config
    from posttrain.generation.engines import generate_replies, load_generator, release
    from posttrain.rewards import verify_row

    cfg = load_config(args.config)
    settings = cfg.base.settings()
    rejection = cfg.stage("rejection_sampling")
    evaluation_rows = _load_rows(args.world / "eval_math.jsonl", args.eval_rows)
    rejection_rows = _load_rows(args.world / "rejection_prompts.jsonl", args.rejection_rows)
    calls = {
        "evaluation (greedy, math suite)": (evaluation_rows, dict(
            max_new_tokens=cfg.evaluation.max_new_tokens, batch_size=cfg.evaluation.batch_size)),
        "rejection sampling (sampled)": (rejection_rows, dict(
            max_new_tokens=rejection.max_new_tokens, do_sample=True, temperature=rejection.temperature,
            num_samples=rejection.samples_per_prompt, seed=0, batch_size=cfg.evaluation.batch_size)),
    }
    results, replies = [], {}
    torch.set_num_threads(cfg.evaluation.threads)
    for backend in ("hf", "vllm"):
        for name, (rows, options) in calls.items():
            started = time.perf_counter()
            model, tokenizer = load_generator(args.checkpoint, settings, cfg.evaluation.model_copy(update={"backend": backend}))
            loaded = time.perf_counter()
            out = generate_replies(model, tokenizer, settings.chat, [(r["prompt"], True) for r in rows], **options)
            done = time.perf_counter()
            release(model)
            generations = [g for samples in out for g in samples]
            tokens = sum(g.num_tokens for g in generations)
            reward = sum(verify_row(g.text, r)[0] for r, samples in zip(rows, out) for g in samples) / len(generations)
            replies[(backend, name)] = [g.text for g in generations]
            results.append({"backend": backend, "call": name, "prompts": len(rows), "replies": len(generations),
                            "load_s": round(loaded - started, 1), "generate_s": round(done - loaded, 2),
                            "wall_s": round(done - started, 1), "tokens": tokens,
                            "tokens_per_s": round(tokens / (done - loaded)), "math_reward": round(reward, 4)})
            print(json.dumps(results[-1]), flush=True)
    greedy = "evaluation (greedy, math suite)"
    same = sum(a == b for a, b in zip(replies[("hf", greedy)], replies[("vllm", greedy)]))
    from transformers import AutoConfig

    shape = AutoConfig.from_pretrained(args.checkpoint)
    summary = {"checkpoint": str(args.checkpoint), "hidden": shape.hidden_size, "layers": shape.num_hidden_layers,
               "threads": cfg.evaluation.threads, "calls": results,
               "greedy_identical": same, "greedy_total": len(replies[("hf", greedy)])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(summary, indent=2))
    lines = ["| call | backend | prompts x samples | engine start / load s | generate s | wall s | tokens/s | math reward |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['call']} | {r['backend']} | {r['replies']} | {r['load_s']} | {r['generate_s']} | "
                     f"{r['wall_s']} | {r['tokens_per_s']} | {r['math_reward']} |")
    lines.append(f"\nGreedy replies token-identical between the engines: {same} of {summary['greedy_total']}.")
    args.out.with_suffix(".table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
