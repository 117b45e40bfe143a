"""`posttrain` command line: run the pipeline, build the world, verify answers."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from posttrain.env import configure_offline

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _cmd_run(args) -> int:
    from flows.pipeline import pipeline

    state = pipeline(config_path=str(Path(args.config).absolute()), stages=args.stages, seed=args.seed,
                     force=args.force, return_state=True)
    if state.is_completed():
        out = state.result()
        print(f"run id: {out['run_id']}\nreport: {out['report']}")
        return 0
    print(f"run failed: {state.message}", file=sys.stderr)
    try:
        state.result()
    except Exception as exc:  # the flow's own error: say it once, plainly
        print(f"error: {exc}", file=sys.stderr)
    return 1


def _cmd_world(args) -> int:
    from posttrain.config import load_config
    from posttrain.world import build

    cfg = load_config(args.config)
    if args.step == "data":
        manifest = build.build_data(cfg)
        print("\n".join(f"{k}: {v['rows']} rows" for k, v in manifest.items()))
    elif args.step == "tokenizer":
        build.build_tokenizer(cfg)
    elif args.step == "base":
        print(build.build_base(cfg, args.which))
    return 0


def _cmd_verify(args) -> int:
    if args.kind != "math":
        print(f"unknown verifier kind {args.kind!r} (known: math)", file=sys.stderr)
        return 2
    from posttrain.rewards.math_verifier import verify_stream

    verify_stream(sys.stdin, sys.stdout)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="posttrain", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the pipeline (stages, gates, registry, report card)")
    run.add_argument("--config", default=str(PROJECT_ROOT / "configs" / "default.yaml"))
    run.add_argument("--stages", nargs="+", choices=[
        "cold_start_sft", "reasoning_rl", "rejection_sampling", "mode_fusion_sft", "general_rl", "distillation"],
        help="run only these stages (default: all)")
    run.add_argument("--seed", type=int, help="override the config's seed")
    run.add_argument("--force", action="store_true", help="recompute cached stages")
    run.set_defaults(func=_cmd_run)

    world = sub.add_parser("world", help="build the embedded world (dvc.yaml runs these)")
    world.add_argument("step", choices=["data", "tokenizer", "base"])
    world.add_argument("--which", choices=["teacher", "student"], default="teacher")
    world.add_argument("--config", default=str(PROJECT_ROOT / "configs" / "default.yaml"))
    world.set_defaults(func=_cmd_world)

    verify = sub.add_parser("verify", help="verify answers: JSON lines on stdin, one verdict per line out")
    verify.add_argument("--kind", default="math")
    verify.set_defaults(func=_cmd_verify)
    return parser


def main(argv: list[str] | None = None) -> int:
    configure_offline(PROJECT_ROOT)
    args = build_parser().parse_args(argv)
    from posttrain.config import ConfigError
    from posttrain.world.build import DatasetError

    try:
        return args.func(args)
    except (ConfigError, DatasetError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
