"""`posttrain data check` and a run's data preparation, cold and with the normalised rows cached
(posttrain.data.row_cache), on a published-size source: 120k rows in
NuminaMath-CoT's shape (problem, solution with a boxed answer, messages), read as the docs say
(`answer_from: {column: solution, extract: boxed}`), as `reasoning_prompts` of a user project.

    python bench/data_scale.py --rows 120000 --out bench/results/data_scale

Wall time and peak memory (`/usr/bin/time -v`) of each command in its own process.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def write_numina(path: Path, rows: int, seed: int = 0) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    problems, solutions, messages = [], [], []
    for i in range(rows):
        a, b = rng.randint(10, 99_999), rng.randint(10, 99_999)
        problem = f"Problem {i}: a store sells {a} pens on Monday and {b} on Tuesday. How many pens in all?"
        solution = (f"On Monday the store sells {a} pens. On Tuesday it sells {b}. " * 3
                    + f"In all: $ {a} + {b} = {a + b} $, so the answer is $\\boxed{{{a + b}}}$.")
        problems.append(problem)
        solutions.append(solution)
        messages.append([{"role": "user", "content": problem}, {"role": "assistant", "content": solution}])
    table = pa.table({"source": ["synthetic"] * rows, "problem": problems, "solution": solutions, "messages": messages})
    pq.write_table(table, path)


def timed(command: list[str], cwd: Path) -> dict:
    started = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *command], cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return {"wall_s": round(wall, 1), "peak_rss_mib": round(int(peak.group(1)) / 1024) if peak else None,
            "output_tail": done.stdout.strip().splitlines()[-6:]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=120_000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "data_scale")
    args = parser.parse_args()

    import yaml

    from tests.userdata import build_project

    root = Path(tempfile.mkdtemp(prefix="data-scale-"))
    config_path = build_project(root)
    write_numina(root / "data" / "numina.parquet", args.rows)
    config = yaml.safe_load(config_path.read_text())
    config["data"]["reasoning_prompts"] = {"path": "data/numina.parquet", "kind": "math",
                                           "columns": {"problem": "prompt"},
                                           "answer_from": {"column": "solution", "extract": "boxed"}}
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    posttrain = str(Path(sys.executable).with_name("posttrain"))
    prepare = [sys.executable, "-c", "import sys; from pathlib import Path; from posttrain.config import load_config; "
               "from posttrain.data.prepared import prepare; prepare(load_config(sys.argv[1]), Path(sys.argv[2]))",
               str(config_path), str(root / "runs" / "prepared")]
    check = [posttrain, "data", "check", "--config", str(config_path)]
    cache = root / "runs" / "cache" / "normalised"   # posttrain.data.row_cache: filled by the first command
    results = {"rows": args.rows, "file_mib": round((root / "data" / "numina.parquet").stat().st_size / 2**20, 1),
               "data_check": timed(check, root), "data_check_again": timed(check, root),
               "prepare_after_check": timed(prepare, root)}
    results["cache_mib"] = round(sum(f.stat().st_size for f in cache.iterdir()) / 2**20, 1)
    shutil.rmtree(cache)
    results["prepare_cold"] = timed(prepare, root)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
