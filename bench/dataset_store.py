"""How long the DVC data store takes to track (add, push, commit) and restore a produced dataset.

    .venv/bin/python bench/dataset_store.py [--mb 1.1] [--repeats 5]

Target: a 1.1 MB JSONL tracked in under 5 s on 2 shared cores (it was 0.3-0.7 s when measured
first). Writes bench/results/dataset_store.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from posttrain.env import configure_offline  # noqa: E402

configure_offline()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=1.1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from posttrain.data.store import DatasetStore

    track, restore = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
        store = DatasetStore(root / "runs" / "data-store")
        rows = int(args.mb * 1e6 / 110)
        for i in range(args.repeats):
            src = root / f"out{i}.jsonl"
            src.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"q{i}-{n}"},
                                                            {"role": "assistant", "content": "x" * 60}]}) + "\n"
                                   for n in range(rows)))
            started = time.perf_counter()
            ref = store.track(src, f"bench/sft-{i}.jsonl", rows=rows)
            track.append(time.perf_counter() - started)
            (store.root / ref.path).unlink()
            started = time.perf_counter()
            store.restore(ref)
            restore.append(time.perf_counter() - started)
    record = {"mb": round(src.stat().st_size / 1e6, 2), "repeats": args.repeats,
              "track_s_median": statistics.median(track), "track_s_max": max(track),
              "restore_s_median": statistics.median(restore), "target_track_s": 5.0,
              "meets_target": max(track) < 5.0}
    out = ROOT / "bench" / "results" / "dataset_store.json"
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
