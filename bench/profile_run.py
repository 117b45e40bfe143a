"""Where the seconds of a `make run` go: every progress bar of its log (pretraining, evaluations,
training, generation) with its elapsed time, grouped by stage, beside the stage walls of the run's
report card and the whole command's wall time.

    /usr/bin/time -v make run 2>&1 | tee make_run.log
    python bench/profile_run.py make_run.log runs/<run_id>/report.json --total-wall-s 2051 \
        --record bench/results/make_run_profile

The bars are the ones the code already draws (tqdm): their last state carries the elapsed time. A
stage's wall minus its bars is what no bar covers (loading, saving, the registry, DVC, plots); a bar
drawn inside another (reasoning RL's held-out probes run inside its training bar) makes it negative.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

# "desc:  42%|####      | 84/200 [01:02<01:26, ...]"; the Trainer's own bar has no desc.
BAR = re.compile(r"(?:(?P<desc>[^|\r\n]*?):\s+|^\s*)\d+%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+) \[(?P<elapsed>[\d:]+)<")
STAGE_LINE = re.compile(r"INFO .*? - (?P<stage>[a-z_]+): gate (?:passed|FAILED)")
CHAIN_START = re.compile(r"INFO .*? - role '|evaluating base")


def seconds(clock: str) -> int:
    total = 0
    for part in clock.split(":"):
        total = total * 60 + int(part)
    return total


def bars(log: str) -> list[dict]:
    """Every bar once, at its last state, in the order the log shows them, with the stage it ran in
    (the stage whose gate line comes next; 'world' before the chain's first data line)."""
    found: list[dict] = []
    open_bars: dict[str, dict] = {}
    stage_of_next: list[dict] = []
    in_chain = False
    for segment in re.split(r"[\r\n]", log):
        if not in_chain and CHAIN_START.search(segment):
            in_chain = True
        if (line := STAGE_LINE.search(segment)):
            for bar in stage_of_next:
                bar["stage"] = line.group("stage")
            stage_of_next, open_bars = [], {}
            continue
        for match in BAR.finditer(segment):
            desc, n, total = (match.group("desc") or "").strip(), int(match.group("n")), int(match.group("total"))
            bar = open_bars.get(desc)
            if bar is None or n < bar["n"] or total != bar["total"]:
                stage = "world" if not in_chain else "base" if desc == "evaluating base" else None
                bar = {"desc": desc, "stage": stage, "n": n, "total": total, "s": 0}
                open_bars[desc] = bar
                found.append(bar)
                if stage is None:
                    stage_of_next.append(bar)
            bar["n"], bar["s"] = n, seconds(match.group("elapsed"))
    for bar in stage_of_next:
        bar["stage"] = "after the chain"
    return found


def kind(desc: str) -> str:
    if desc.startswith("pretraining"):
        return "pretraining"
    if desc.startswith(("evaluating", "probing", "probe")):
        return "evaluation"
    if desc.startswith(("generating", "sampling", "teacher", "resampl", "rejection")):
        return "generation"
    if not desc or desc.startswith(("train", "Train")):
        return "training"
    return "other"


def profile(log_path: Path, report_path: Path | None, total_wall_s: float | None) -> dict:
    found = bars(log_path.read_text(encoding="utf-8", errors="replace"))
    report = json.loads(report_path.read_text()) if report_path else {"stages": []}
    walls = {s["name"]: s.get("wall_s") for s in report.get("stages", [])}
    stages: dict[str, dict] = {}
    for bar in found:
        entry = stages.setdefault(bar["stage"], {"bars": [], "by_kind": {}})
        entry["bars"].append({k: bar[k] for k in ("desc", "total", "s")})
        part = kind(bar["desc"])
        entry["by_kind"][part] = entry["by_kind"].get(part, 0) + bar["s"]
    for name, entry in stages.items():
        entry["wall_s"] = walls.get(name)
    if "base" in stages:   # the report card gives the base no wall: it is its evaluation
        stages["base"]["wall_s"] = sum(stages["base"]["by_kind"].values())
    # What the stage walls leave of the flow: the world (data, tokenizer, pretraining), data preparation
    # and the base evaluation; what the flow leaves of the command: the venv and the flow's start.
    if report.get("wall_s") is not None:
        chain = sum(w for name, w in walls.items() if w is not None and name != "base")
        stages.setdefault("world", {"bars": [], "by_kind": {}})["wall_s"] = report["wall_s"] - chain \
            - stages.get("base", {}).get("wall_s", 0)
        first = {name: stages.pop(name) for name in ("world", "base") if name in stages}
        if total_wall_s is not None:
            first = {"set-up": {"bars": [], "by_kind": {}, "wall_s": total_wall_s - report["wall_s"]}, **first}
        stages = {**first, **stages}
    return {"log": str(log_path), "run_id": report.get("run_id"), "flow_wall_s": report.get("wall_s"),
            "total_wall_s": total_wall_s, "stages": stages}


def markdown(result: dict) -> str:
    lines = [f"`make run` {result['total_wall_s'] or '?'} s, flow {round(result['flow_wall_s'] or 0)} s "
             f"(run {result['run_id']})", "",
             "| stage | wall s | pretraining | evaluation | training | generation | other bars | not in a bar |",
             "|---|---|---|---|---|---|---|---|"]
    for name, entry in result["stages"].items():
        k = entry["by_kind"]
        covered = sum(k.values())
        wall = entry.get("wall_s")
        rest = f"{wall - covered:.0f}" if wall is not None else ""
        lines.append(f"| {name} | {'' if wall is None else f'{wall:.0f}'} | " + " | ".join(
            str(k.get(c, "")) for c in ("pretraining", "evaluation", "training", "generation", "other")) + f" | {rest} |")
    lines += ["", "Bars (seconds, in log order):", ""]
    for name, entry in result["stages"].items():
        parts = ", ".join(f"{b['desc'] or 'training'} {b['s']}" for b in entry["bars"] if b["s"] >= 2)
        lines.append(f"- {name}: {parts}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("log", type=Path)
    parser.add_argument("report", type=Path, nargs="?")
    parser.add_argument("--total-wall-s", type=float)
    parser.add_argument("--record", type=Path, help="write <record>.json and <record>.md")
    args = parser.parse_args()
    result = profile(args.log, args.report, args.total_wall_s)
    text = markdown(result)
    print(text)
    if args.record:
        args.record.with_suffix(".json").write_text(json.dumps(result, indent=2))
        args.record.with_suffix(".md").write_text(text)


if __name__ == "__main__":
    main()
