"""What a verifier change does to a finished run's held-out metrics, without training again.

    generate: every checkpoint of a run (base and each stage, from its report.json) answers the
              config's evaluation suites once, as evaluation draws them; the replies go to a JSON file.
    score:    those replies scored by the verifiers of the code that runs this command (a git
              worktree of another commit scores with that commit's verifiers); metrics per checkpoint.
    compare:  two score files side by side, the metrics that moved.

    python bench/rescore_eval.py generate --run runs/<id> --config configs/default.yaml --out /tmp/replies.json
    python bench/rescore_eval.py score /tmp/replies.json --config configs/default.yaml --out /tmp/new.json
    python bench/rescore_eval.py compare /tmp/old.json /tmp/new.json --record bench/results/<name>

Replies are greedy (or seeded samples) from fixed checkpoints, so both scorings see the same text:
a difference is the verifiers', nothing else. Training rewards change too, which only a new run shows.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def generate(run: Path, config: Path, out: Path) -> None:
    from posttrain.config.loading import load_config
    from posttrain.evaluation.suites import suite_generations, suite_rows
    from posttrain.generation.engines import load_generator, release
    from posttrain.schema import RunReport

    cfg = load_config(config)
    report = RunReport.model_validate_json((run / "report.json").read_text())
    rows = suite_rows(cfg)
    replies: dict[str, dict] = {}
    seen: dict[str, str] = {}
    for entry in report.stages:
        if entry.checkpoint is None:
            continue
        if entry.checkpoint.digest in seen:   # a data-only stage: its parent's checkpoint
            replies[entry.name] = {"same_as": seen[entry.checkpoint.digest]}
            continue
        seen[entry.checkpoint.digest] = entry.name
        model, tokenizer = load_generator(entry.checkpoint, cfg.base.settings(), cfg.evaluation)
        try:
            generations = suite_generations(model, tokenizer, cfg, rows, desc=f"replies of {entry.name}")
        finally:
            release(model)
        replies[entry.name] = {suite: [[asdict(g) for g in gens] for gens in per_row]
                               for suite, per_row in generations.items()}
    out.write_text(json.dumps({"run": report.run_id, "replies": replies}))
    print(f"replies of {len(seen)} checkpoints -> {out}")


def score(replies_file: Path, config: Path, out: Path) -> None:
    from posttrain.config.loading import load_config
    from posttrain.evaluation.suites import score_suite, suite_rows
    from posttrain.generation.engines import Generation
    from posttrain.rewards import VERIFIER_VERSIONS

    cfg = load_config(config)
    rows = suite_rows(cfg)
    data = json.loads(replies_file.read_text())
    metrics: dict[str, dict[str, float]] = {}
    for stage, suites in data["replies"].items():
        if "same_as" in suites:
            metrics[stage] = metrics[suites["same_as"]]
            continue
        metrics[stage] = {}
        for suite in cfg.data.suites():
            generations = [[Generation(**g) for g in gens] for gens in suites[suite.name]]
            metrics[stage].update(score_suite(suite, rows[suite.name], generations)[0])
    out.write_text(json.dumps({"run": data["run"], "verifiers": VERIFIER_VERSIONS, "metrics": metrics}, indent=1))
    print(f"scored with {VERIFIER_VERSIONS} -> {out}")


def compare(old_file: Path, new_file: Path, record: Path | None) -> None:
    old, new = json.loads(old_file.read_text()), json.loads(new_file.read_text())
    moved = [f"| {stage} | {name} | {old['metrics'][stage][name]:.3f} | {value:.3f} | "
             f"{value - old['metrics'][stage][name]:+.3f} |"
             for stage, values in new["metrics"].items() for name, value in values.items()
             if abs(value - old["metrics"].get(stage, {}).get(name, value)) > 1e-9]
    changed = {k: f"{old['verifiers'].get(k)} -> {v}" for k, v in new["verifiers"].items()
               if old["verifiers"].get(k) != v}
    text = "\n".join([
        f"# Held-out metrics of run {new['run']} rescored: the same replies, other verifiers", "",
        "Verifiers changed: " + (", ".join(f"{k} ({v})" for k, v in changed.items()) or "none"), "",
        "| checkpoint | metric | before | after | change |", "|---|---|---|---|---|",
        *(moved or ["| - | nothing moved | | | |"]), ""])
    print(text)
    if record:
        record.with_suffix(".md").write_text(text)
        record.with_suffix(".json").write_text(json.dumps({"before": old, "after": new}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--run", type=Path, required=True)
    g.add_argument("--config", type=Path, default=ROOT / "configs" / "default.yaml")
    g.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("score")
    s.add_argument("replies", type=Path)
    s.add_argument("--config", type=Path, default=ROOT / "configs" / "default.yaml")
    s.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("compare")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    c.add_argument("--record", type=Path)
    args = parser.parse_args()
    if args.command == "generate":
        generate(args.run, args.config, args.out)
    elif args.command == "score":
        score(args.replies, args.config, args.out)
    else:
        compare(args.old, args.new, args.record)


if __name__ == "__main__":
    main()
