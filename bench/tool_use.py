"""Tool use in the embedded world (issue 41): what the tool buys after the cold start, and what
general RL's episodes add, over seeds.

Part 1, with and without the tool: a run's base, cold-start and mode-fusion checkpoints on the
held-out tool suite (each episode run in its environment and judged on it) and on the same
questions without any tool (`eval_tool_bare.jsonl`, kind direct: the model alone), per task kind.

Part 2, general RL: the config's general RL recipe from the run's fusion checkpoint (tool prompts
among the others, the run's reward model for the open-ended kind), one run per seed, evaluated on
every held-out suite; paired item-level differences against the fusion checkpoint pooled over
seeds (95% CI), and the mean of each seed with its t-interval.

    .venv/bin/python bench/tool_use.py --config configs/tools.yaml --run runs/tools/<run> --seeds 3 \
        --out /tmp/tools --record bench/results/tool_use
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from posttrain.env import configure_offline

configure_offline()
sys.path.insert(0, str(Path(__file__).resolve().parent))

from stage_data import arms_plot, mean_ci, paired_against, prepared_data, stage_inputs  # noqa: E402

from posttrain.registry.checkpoint import directory_digest  # noqa: E402
from posttrain.config.pipeline import EvalSuiteConfig
from posttrain.config.loading import load_config  # noqa: E402
from posttrain.evaluation.suites import by_field, evaluate  # noqa: E402
from posttrain.schema import CheckpointRef  # noqa: E402

KINDS = ("lookup", "copy", "product")
METRICS = ("tool/accuracy", "tool/tool_calls", "math/accuracy", "no_think/mode_compliance", "instruction/accuracy",
           "open/accuracy", "direct/accuracy")


def ref(path: Path) -> CheckpointRef:
    return CheckpointRef(path=str(path.absolute()), digest=directory_digest(path))


def with_bare_suite(cfg):
    """The config with the tool suite's questions asked without tools (kind direct)."""
    tool = next(s for s in cfg.data.eval if s.kind == "tool")
    source = tool.sources[0]
    bare = EvalSuiteConfig(name="tool_bare", kind="direct", mode="row", max_new_tokens=tool.max_new_tokens,
                           sources=[source.model_copy(update={"path": source.path.replace("eval_tool.jsonl", "eval_tool_bare.jsonl"),
                                                              "kind": "direct"})])
    return cfg.model_copy(update={"data": cfg.data.model_copy(update={"eval": [*cfg.data.eval, bare]})})


def per_kind(rows: list[dict], scores: list[float]) -> dict[str, float]:
    return by_field(rows, scores, "group") if rows else {}


def with_and_without(cfg, run: Path) -> dict:
    cfg = with_bare_suite(cfg)
    data = prepared_data(cfg, ())
    suites = {k: v for k, v in data.suites.items() if k in ("tool", "tool_bare")}
    rows = {k: [json.loads(line) for line in Path(v.path).read_text().splitlines()] for k, v in suites.items()}
    out = {}
    for label, path in (("base", Path(cfg.path(cfg.paths.world)) / "base"),
                        ("cold_start_sft", run / "cold_start_sft" / "checkpoint"),
                        ("mode_fusion_sft", run / "mode_fusion_sft" / "checkpoint")):
        result = evaluate(ref(path), cfg, suites=suites, desc=f"{label} with and without tools")
        out[label] = {"with_tool": result.metrics["tool/accuracy"], "without_tool": result.metrics["tool_bare/accuracy"],
                      "calls": result.metrics.get("tool/tool_calls"),
                      "with_by_kind": per_kind(rows["tool"], result.per_item["tool/accuracy"]),
                      "without_by_kind": per_kind(rows["tool_bare"], result.per_item["tool_bare/accuracy"]),
                      "failures": {k: v for k, v in result.metrics.items() if k.startswith("tool/failed_")},
                      "per_item": {m: result.per_item[m] for m in ("tool/accuracy", "tool_bare/accuracy")}}
        print(json.dumps({label: {k: v for k, v in out[label].items() if k != "per_item"}}), flush=True)
    return out


def paid_share(trajectories: Path) -> float | None:
    """The share of the stage's training episodes its tool reward paid (their recorded scores)."""
    if not trajectories.is_file():
        return None
    scores = [json.loads(line)["score"] for line in trajectories.read_text().splitlines() if line.strip()]
    return sum(scores) / len(scores) if scores else None


def general_rl_seeds(cfg, run: Path, seeds: list[int], out: Path) -> tuple[dict, dict]:
    from stages import general_rl

    data = prepared_data(cfg, ("general_rl",))
    fusion = ref(run / "mode_fusion_sft" / "checkpoint")
    reward_model = ref(run / "reward_model" / "reward_model")
    start = out / "fusion.json"
    if not start.is_file():
        result = evaluate(fusion, cfg, suites=data.suites, desc="fusion")
        start.write_text(json.dumps({"metrics": result.metrics, "per_item": result.per_item}))
    baseline = json.loads(start.read_text())
    per_seed = {}
    for seed in seeds:
        done = out / f"seed{seed}.json"
        if not done.is_file():
            inputs = stage_inputs(cfg, "general_rl", data, work_dir=out / f"seed{seed}", parent=fusion, seed=seed,
                                  reward_model=reward_model, data_store=str(cfg.path(cfg.paths.data_store)),
                                  dvc_remote=str(cfg.path(cfg.paths.dvc_remote)))
            started = time.time()
            result = general_rl.run(cfg.stage("general_rl"), inputs)
            wall = time.time() - started
            evaluation = evaluate(result.checkpoint, cfg, suites=data.suites, desc=f"general RL seed {seed}")
            done.write_text(json.dumps({
                "wall_s": wall, "alerts": result.alerts, "episodes": result.datasets_produced[0].rows if result.datasets_produced else 0,
                "metrics": evaluation.metrics, "per_item": evaluation.per_item}))
        record = json.loads(done.read_text())
        record["paid_tool"] = paid_share(out / f"seed{seed}" / "trajectories.jsonl")
        per_seed[seed] = {"general_rl": record, "fusion": baseline}
        print(json.dumps({seed: {m: per_seed[seed]["general_rl"]["metrics"].get(m) for m in METRICS}}), flush=True)
    return per_seed, baseline


def summarise(per_seed: dict, baseline: dict) -> dict:
    metrics = [m for m in METRICS if all(m in per_seed[s]["general_rl"]["metrics"] for s in per_seed)]
    return {"fusion": {m: baseline["metrics"][m] for m in metrics},
            "general_rl": {m: mean_ci([per_seed[s]["general_rl"]["metrics"][m] for s in per_seed]) for m in metrics},
            "paired": paired_against(per_seed, "general_rl", "fusion", [m for m in metrics if m != "tool/tool_calls"], 0.95),
            "wall_s": mean_ci([per_seed[s]["general_rl"]["wall_s"] for s in per_seed])}


def markdown(part1: dict, summary: dict, per_seed: dict, meta: dict) -> str:
    pct = lambda v: f"{v:.3f}"  # noqa: E731
    lines = ["# Tool use in the embedded world", "",
             f"Run `{meta['run']}`, config `{meta['config']}`, recorded {meta['recorded']}; "
             "`.venv/bin/python bench/tool_use.py --config configs/tools.yaml --run runs/tools/<run> --seeds 3 --out /tmp/tools --record bench/results/tool_use`.",
             "", "## With and without the tool", "",
             "The held-out tool suite (150 episodes, judged on the environment) against the same questions "
             "asked without tools (kind direct).", "",
             "| checkpoint | with tool | without | calls / episode | " + " | ".join(f"{k} with / without" for k in KINDS)
             + " | failures |", "|---|---|---|---|" + "---|" * len(KINDS) + "---|"]
    for label, r in part1.items():
        kinds = " | ".join(f"{r['with_by_kind'].get(k, 0):.2f} / {r['without_by_kind'].get(k, 0):.2f}" for k in KINDS)
        fails = ", ".join(f"{k.removeprefix('tool/failed_')} {v:.2f}" for k, v in sorted(r["failures"].items()) if v) or "–"
        lines.append(f"| {label} | {pct(r['with_tool'])} | {pct(r['without_tool'])} | {r['calls'] or 0:.2f} | {kinds} | {fails} |")
    if summary:
        metrics = list(summary["general_rl"])
        lines += ["", f"## General RL from the fusion checkpoint, seeds {meta['seeds']}", "",
                  "| metric | fusion | general RL (mean, 95% t-interval) | paired difference, pooled (95% CI) |",
                  "|---|---|---|---|"]
        for m in metrics:
            g, d = summary["general_rl"][m], summary["paired"].get(m)
            diff = f"{d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}]" if d else "–"
            lines.append(f"| {m} | {summary['fusion'][m]:.3f} | {g[0]:.3f} [{g[1]:.3f}, {g[2]:.3f}] | {diff} |")
        lines += ["", "| seed | " + " | ".join(metrics) + " | paid tool reward | episodes | wall s | alerts |",
                  "|---|" + "---|" * (len(metrics) + 4)]
        for seed, arms in per_seed.items():
            a = arms["general_rl"]
            lines.append(f"| {seed} | " + " | ".join(f"{a['metrics'][m]:.3f}" for m in metrics)
                         + f" | {'–' if a['paid_tool'] is None else format(a['paid_tool'], '.3f')} | {a['episodes']} | {a['wall_s']:.0f} | {'; '.join(a['alerts']) or '–'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/tools.yaml")
    parser.add_argument("--run", required=True, type=Path, help="a run with cold_start_sft, mode_fusion_sft and reward_model")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--skip-part1", action="store_true")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--record", type=Path, help="write <record>.json/.md/.png")
    args = parser.parse_args()
    cfg = load_config(args.config)
    args.out.mkdir(parents=True, exist_ok=True)
    part1_file = args.out / "part1.json"
    if not part1_file.is_file() and not args.skip_part1:
        part1_file.write_text(json.dumps(with_and_without(cfg, args.run.absolute())))
    part1 = json.loads(part1_file.read_text()) if part1_file.is_file() else {}
    seeds = [cfg.seed + i for i in range(args.seeds)]
    per_seed, baseline = general_rl_seeds(cfg, args.run.absolute(), seeds, args.out.absolute()) if seeds else ({}, None)
    summary = summarise(per_seed, baseline) if per_seed else {}
    meta = {"run": str(args.run), "config": args.config, "seeds": seeds, "recorded": time.strftime("%Y-%m-%d %H:%M")}
    text = markdown(part1, summary, per_seed, meta)
    print(text)
    if args.record:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        slim = {s: {k: v for k, v in a["general_rl"].items() if k != "per_item"} for s, a in per_seed.items()}
        part1_slim = {label: {k: v for k, v in r.items() if k != "per_item"} for label, r in part1.items()}
        Path(f"{args.record}.json").write_text(json.dumps({"meta": meta, "with_and_without": part1_slim, "summary": summary,
                                                           "per_seed": slim}, indent=1) + "\n")
        Path(f"{args.record}.md").write_text(text)
        if summary:
            arms = {"fusion": {m: (v, v, v) for m, v in summary["fusion"].items() if m != "tool/tool_calls"},
                    "general RL": {m: v for m, v in summary["general_rl"].items() if m != "tool/tool_calls"}}
            arms_plot(arms, list(arms["fusion"]), Path(f"{args.record}.png"), title="General RL with tool episodes",
                      ylabel="held-out score (general RL: mean over seeds, 95% CI)")


if __name__ == "__main__":
    main()
