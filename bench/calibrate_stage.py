"""Calibration runs outside Prefect: one stage from a given parent checkpoint, on the data roles
the config gives it, then a paired comparison of one held-out metric (math/accuracy unless
`--metric` says otherwise; the same test the gates use).

    python bench/calibrate_stage.py --config configs/default.yaml --stage reasoning_rl \
        --parent runs/<run>/cold_start_sft/checkpoint --out /tmp/rl_try --set trainer.learning_rate=4e-5
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

from posttrain.env import configure_offline

configure_offline()
sys.path.insert(0, str(Path(__file__).resolve().parent))   # the bench's own modules, however this is loaded

from stage_data import prepared_data, stage_inputs  # noqa: E402

from posttrain.registry.checkpoint import directory_digest  # noqa: E402
from posttrain.config.pipeline import STAGES
from posttrain.config.loading import load_config  # noqa: E402
from posttrain.evaluation.suites import evaluate  # noqa: E402
from posttrain.evaluation.gates import paired_interval  # noqa: E402
from posttrain.schema import CheckpointRef, RunReport  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--stage", required=True, choices=STAGES)
    parser.add_argument("--parent", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--set", action="append", default=[], help="dotted override inside the stage config")
    parser.add_argument("--datasets-from", type=Path, help="a run's report.json: hand its produced datasets on")
    parser.add_argument("--student", type=Path, help="student checkpoint (distillation)")
    parser.add_argument("--metric", default="math/accuracy", help="the held-out metric compared, <suite>/<metric>")
    args = parser.parse_args()
    overrides = {f"stages.{args.stage}.{k}": yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    cfg = load_config(args.config, overrides=overrides)
    if args.metric not in cfg.data.metric_names():
        raise SystemExit(f"--metric {args.metric!r}: not a paired metric of the config's suites "
                         f"({', '.join(sorted(cfg.data.metric_names()))})")
    data = prepared_data(cfg, (args.stage,))
    parent = CheckpointRef(path=str(args.parent.absolute()), digest=directory_digest(args.parent))
    before = evaluate(parent, cfg, suites=data.suites)
    started = time.time()
    module = __import__(f"stages.{args.stage}", fromlist=["run"])
    datasets = []
    if args.datasets_from:
        datasets = [d for s in RunReport.read(args.datasets_from).stages for d in s.datasets]
    student = None
    if args.student:
        student = CheckpointRef(path=str(args.student.absolute()), digest=directory_digest(args.student))
    result = module.run(cfg.stage(args.stage), stage_inputs(
        cfg, args.stage, data, work_dir=args.out.absolute(), parent=parent, seed=cfg.seed,
        datasets=datasets, student=student, data_store=str(cfg.path(cfg.paths.data_store)),
        dvc_remote=str(cfg.path(cfg.paths.dvc_remote))))
    wall = time.time() - started
    after = evaluate(result.checkpoint, cfg, suites=data.suites)
    if args.metric not in after.per_item:
        raise SystemExit(f"--metric {args.metric!r} has no per-item values to pair (descriptive metrics cannot be compared)")
    mean, low, high = paired_interval(after.per_item[args.metric], before.per_item[args.metric],
                                      cfg.evaluation.confidence)
    summary = {"stage": args.stage, "overrides": overrides, "wall_s": wall, "metric": args.metric,
               "before": before.metrics[args.metric], "after_value": after.metrics[args.metric],
               "paired_diff": mean, "ci": [low, high], "after": after.metrics, "train": result.train_metrics}
    (args.out / "calibration.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
