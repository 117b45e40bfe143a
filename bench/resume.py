"""Resume cost: a full smoke run vs. runs resumed after a failure injected in stage k.

    .venv/bin/python bench/resume.py [--config configs/smoke.yaml]

For every stage k: a fresh project (its own result cache, registry and data store; the world is
copied from a template so that no run pays for building it) runs `posttrain run` with
POSTTRAIN_FAIL_STAGE=k (stages before k computed, k fails), then `posttrain run` again: the resumed
run, which should reuse the stages before k and compute k onward.  One more fresh project runs the
chain once without a failure: the full run.  Every run is a separate process (`posttrain run`, the
command a user types) in Prefect's ephemeral mode with one temporary PREFECT_HOME.

Reported per k (results/resume.json: raw timings and these; results/resume.md: the table):
  full_s            flow wall of the full run (report.json wall_s; process walls beside it)
  resumed_s         flow wall of the resumed run
  full_k_onward_s   what stages k.. cost in the full run (sum of their wall_s: stage, evaluation,
                    gate, registry)
  outside_s         the resumed run's time outside any stage (world check, registry, cached base
                    evaluation, report card)
  per_reused_s      the resumed run's wall_s of the reused stages / k (each: cache lookup, digest
                    check of the checkpoint, cached evaluation, gate, registry lookup)
  excess_per_reused_s  (resumed_s - outside_s - full_k_onward_s) / k: the reused stages plus the
                    run-to-run noise of recomputing k..
Target: the resumed run costs stage k onward plus at most 5 s per reused stage, i.e.
excess_per_reused_s <= 5 (k = 0: the resumed run costs no more than the full run).

    .venv/bin/python bench/resume.py --render   # rebuild both files from the raw timings recorded
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))

from posttrain.config.pipeline import STAGES  # noqa: E402
from posttrain.schema import RunReport  # noqa: E402

TARGET_S_PER_REUSED = 5.0


def relocate_world(config: dict, world: str) -> dict:
    """The config with its world in `world` (relative to the project): the paths of data sources
    inside the old world directory follow it, so every project reads its own copy."""
    old = config.get("paths", {}).get("world", "data").rstrip("/") + "/"

    def moved(node):
        if isinstance(node, dict):
            return {k: (world.rstrip("/") + "/" + v[len(old):] if k == "path" and isinstance(v, str)
                        and v.startswith(old) else moved(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [moved(v) for v in node]
        return node

    return {**config, "data": moved(config.get("data", {})), "paths": {**config.get("paths", {}), "world": world}}


def _project(base: Path, name: str, config: dict, world: Path | None) -> Path:
    root = base / name
    root.mkdir()
    (root / "smoke.yaml").write_text(yaml.safe_dump(config))
    if world is not None:
        shutil.copytree(world, root / "data")
    return root


def _run(project: Path, prefect_home: Path, fail_stage: str | None) -> dict:
    env = {**os.environ, "PREFECT_HOME": str(prefect_home)}
    for key in ("PREFECT_API_URL", "POSTTRAIN_FAIL_STAGE", "POSTTRAIN_PAUSE_IN_STAGE"):
        env.pop(key, None)
    if fail_stage:
        env["POSTTRAIN_FAIL_STAGE"] = fail_stage
    before = set((project / "runs").glob("*/report.json"))
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "posttrain.cli", "run", "--config", str(project / "smoke.yaml")],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    process_s = time.perf_counter() - started
    if (proc.returncode == 0) != (fail_stage is None):
        raise RuntimeError(f"run with fail_stage={fail_stage} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    (report_path,) = set((project / "runs").glob("*/report.json")) - before
    report = RunReport.read(report_path)
    return {"flow_s": report.wall_s, "process_s": process_s,
            "stages": [{"name": s.name, "cached": s.cached, "wall_s": s.wall_s, "status": s.status}
                       for s in report.stages if s.status != "skipped"]}


def _stage_walls(run: dict) -> dict[str, float]:
    return {s["name"]: s["wall_s"] for s in run["stages"]}


def derive(raw: dict) -> list[dict]:
    """Per failed stage k, the numbers of the module docstring, from the raw timings."""
    full = _stage_walls(raw["full"])
    rows = []
    for k, case in enumerate(raw["cases"]):
        stage, resumed = case["failed_stage"], case["resumed"]
        walls = _stage_walls(resumed)
        k_onward = sum(full[n] for n in STAGES[k:])
        outside = resumed["flow_s"] - sum(walls[n] for n in STAGES)
        reused = sum(walls[n] for n in STAGES[:k])
        excess = resumed["flow_s"] - outside - k_onward
        rows.append({
            "k": k, "failed_stage": stage, "full_s": raw["full"]["flow_s"], "resumed_s": resumed["flow_s"],
            "full_k_onward_s": k_onward, "resumed_k_onward_s": sum(walls[n] for n in STAGES[k:]),
            "outside_s": outside, "reused_stages": k, "per_reused_s": reused / k if k else None,
            "excess_per_reused_s": excess / k if k else None,
            "meets_target": (excess / k <= TARGET_S_PER_REUSED) if k else resumed["flow_s"] <= raw["full"]["flow_s"],
        })
    return rows


def render(summary: dict) -> str:
    full = summary["raw"]["full"]
    full_outside = full["flow_s"] - sum(_stage_walls(full)[n] for n in STAGES)
    lines = [
        "# Resume after a failure in stage k (smoke config)", "",
        f"Recorded {summary['recorded']} on {summary['machine']}; `bench/resume.py` (definitions in its "
        "docstring). Flow walls from report.json; process walls, which add Python start-up and Prefect's "
        "ephemeral server, are in resume.json. Target: the resumed run costs stage k onward plus at most "
        f"{TARGET_S_PER_REUSED:.0f} s per reused stage.", "",
        f"Full run: {full['flow_s']:.1f} s flow ({full['process_s']:.1f} s process), of which "
        f"{full_outside:.1f} s outside the stages (a first run also creates the registry and evaluates the base).", "",
        "| k | failed stage | full s | resumed s | stages k.. in full run s | same, resumed run s | outside stages s "
        "| s per reused stage | excess s per reused stage | target met |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["resumed"]:
        per = "–" if r["per_reused_s"] is None else f"{r['per_reused_s']:.2f}"
        excess = "–" if r["excess_per_reused_s"] is None else f"{r['excess_per_reused_s']:+.2f}"
        lines.append(f"| {r['k']} | {r['failed_stage']} | {r['full_s']:.1f} | {r['resumed_s']:.1f} | "
                     f"{r['full_k_onward_s']:.1f} | {r['resumed_k_onward_s']:.1f} | {r['outside_s']:.1f} | {per} | "
                     f"{excess} | {'yes' if r['meets_target'] else 'NO'} |")
    lines += ["", "excess = resumed − outside stages − (stages k.. in the full run), per reused stage: the reused "
              "stages plus the noise of recomputing k.. (timings on a shared 2-core machine vary by seconds)."]
    return "\n".join(lines) + "\n"


def write(summary: dict) -> None:
    summary["resumed"] = derive(summary["raw"])
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "resume.json").write_text(json.dumps(summary, indent=2))
    (RESULTS / "resume.md").write_text(render(summary))
    print(f"wrote {RESULTS / 'resume.json'} and {RESULTS / 'resume.md'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "smoke.yaml")
    parser.add_argument("--render", action="store_true", help="only rebuild the results from resume.json's raw timings")
    args = parser.parse_args()
    if args.render:
        write(json.loads((RESULTS / "resume.json").read_text()))
        return
    config = relocate_world(yaml.safe_load(args.config.read_text()), "data")
    config["paths"] = {"world": "data", "runs": "runs", "registry": "runs/registry",
                       "data_store": "runs/data-store", "dvc_remote": "runs/dvc-remote"}
    load_at_start = os.getloadavg()

    with tempfile.TemporaryDirectory(prefix="bench-resume-") as tmp:
        base = Path(tmp)
        prefect_home = base / "prefect-home"
        template = _project(base, "template", config, None)
        from posttrain.config.loading import load_config
        from posttrain.world.build import ensure_world

        ensure_world(load_config(template / "smoke.yaml"), log=lambda *_: None)
        world = template / "data"

        raw = {"full": _run(_project(base, "full", config, world), prefect_home, None), "cases": []}
        print(f"full run: flow {raw['full']['flow_s']:.1f} s, process {raw['full']['process_s']:.1f} s")
        for k, stage in enumerate(STAGES):
            project = _project(base, f"fail-{stage}", config, world)
            failed = _run(project, prefect_home, stage)
            resumed = _run(project, prefect_home, None)
            cached = {s["name"]: s["cached"] for s in resumed["stages"]}
            wrong = [n for i, n in enumerate(STAGES) if cached[n] != (i < k)]
            if wrong:
                raise RuntimeError(f"resume after a failure in {stage}: unexpected cache use for {wrong}")
            raw["cases"].append({"failed_stage": stage, "failed": failed, "resumed": resumed})
            print(f"k={k} {stage}: failed run {failed['flow_s']:.1f} s, resumed {resumed['flow_s']:.1f} s")

    write({
        "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average at start "
                   + "/".join(f"{x:.1f}" for x in load_at_start),
        "config": str(args.config.relative_to(ROOT) if args.config.is_relative_to(ROOT) else args.config),
        "target_s_per_reused_stage": TARGET_S_PER_REUSED,
        "raw": raw,
    })


if __name__ == "__main__":
    main()
