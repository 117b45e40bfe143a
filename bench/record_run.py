"""Record a finished pipeline run (its report card and wall times) under bench/results/.

    python bench/record_run.py runs/<run_id>/report.json --name make_run_default
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
from datetime import datetime, timezone
from pathlib import Path

from posttrain.schema import RunReport

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("report", type=Path)
    parser.add_argument("--name", required=True)
    parser.add_argument("--total-wall-s", type=float, help="wall time of the whole command (e.g. make run)")
    args = parser.parse_args()
    report = RunReport.read(args.report)
    summary = {
        "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": report.machine or f"{platform.machine()}, {os.cpu_count()} cores",
        "run_id": report.run_id, "flow_wall_s": report.wall_s, "total_wall_s": args.total_wall_s,
        "stages": [{"name": s.name, "status": s.status, "cached": s.cached, "wall_s": s.wall_s,
                    "gate_passed": s.gate.passed if s.gate else None, "eval": s.eval} for s in report.stages],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(summary, indent=2))
    shutil.copy(args.report.with_name("report.md"), RESULTS / f"{args.name}.md")
    for png in ("capabilities.png", "training.png", "rl.png", "budget.png"):
        if args.report.with_name(png).exists():
            shutil.copy(args.report.with_name(png), RESULTS / f"{args.name}_{png}")
    print(f"recorded {args.name}: flow {report.wall_s:.0f} s")


if __name__ == "__main__":
    main()
