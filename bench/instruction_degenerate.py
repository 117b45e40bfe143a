"""What junk earns from the instruction verifier: a stand-in for the untrained base model's
instruction-following score (the report card's row), which came from constraints met vacuously.

Scores a fixed set of degenerate replies (empty, special tokens only, one letter, one word repeated,
punctuation, random digits, one CJK character), each as a raw reply and behind an empty think block
(the /no_think shape), against the embedded world's held-out instruction tasks (generated as the
world build does: `instruction_tasks(eval_instruction, seed + 3, "eval")`). "before" is the verifier
as of commit BEFORE_COMMIT (read with `git show`, nothing checked out), "after" the working tree's,
called as the evaluation calls it (with the task's reference answer). Also checks that every gold
response still scores 1, and times the verifier per call.

    .venv/bin/python bench/instruction_degenerate.py [--config configs/default.yaml]

Writes bench/results/instruction_degenerate.json and .md.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from posttrain.chat import assemble_response  # noqa: E402
from posttrain.rewards.instruction import INSTRUCTION_VERSION, instruction_score  # noqa: E402
from posttrain.world.tasks import instruction_tasks  # noqa: E402

BEFORE_COMMIT = "5bc55a9"  # the last commit with instruction/1
RESULTS = ROOT / "bench" / "results"

JUNK = {
    "empty": "",
    "special tokens only": "<|im_end|>",
    "one letter": "A",
    "one word repeated": "the the the the the",
    "punctuation": "... ?! --",
    "random digits (one number)": "83920174",
    "random digits (several)": "7 3 9 1 4 8",
    "one CJK character": "的",
}


def _old_instruction_score():
    source = subprocess.run(["git", "show", f"{BEFORE_COMMIT}:posttrain/rewards/instruction.py"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("instruction_before", f.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    Path(f.name).unlink()
    return module.instruction_score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/default.yaml")
    args = parser.parse_args()
    cfg = yaml.safe_load((ROOT / args.config).read_text())
    n, seed = cfg["world"]["eval_instruction"], cfg["world"]["seed"]
    tasks = instruction_tasks(n, seed + 3, "eval")
    before_score = _old_instruction_score()

    rows, per_junk, per_type = [], {}, {}
    for name, junk in JUNK.items():
        for shape, response in (("raw", junk), ("empty think block", assemble_response("", junk))):
            for t in tasks:
                before = before_score(response, t.constraints)
                after = instruction_score(response, t.constraints, reference=t.answer)
                rows.append((before, after))
                per_junk.setdefault(name, []).append((before, after))
                per_type.setdefault(t.constraints[0]["type"], []).append((before, after))

    def means(pairs):
        return {"before": round(statistics.mean(p[0] for p in pairs), 4),
                "after": round(statistics.mean(p[1] for p in pairs), 4)}

    started = time.perf_counter()
    gold = [instruction_score(t.gold_response, t.constraints, reference=t.answer) for t in tasks]
    per_call_us = (time.perf_counter() - started) / len(tasks) * 1e6
    result = {
        "version": {"before": "instruction/1 @ " + BEFORE_COMMIT, "after": INSTRUCTION_VERSION},
        "tasks": len(tasks), "world_seed": seed, "junk_replies": JUNK, "scored_pairs": len(rows),
        "mean": means(rows),
        "by_junk": {k: means(v) for k, v in per_junk.items()},
        "by_constraint": {k: means(v) for k, v in sorted(per_type.items())},
        "gold_responses_scoring_1": f"{sum(g == 1.0 for g in gold)}/{len(gold)}",
        "gold_us_per_call": round(per_call_us, 1),
        "machine": platform.machine(), "python": platform.python_version(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "instruction_degenerate.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    lines = [f"# Instruction verifier on junk replies ({len(tasks)} held-out world tasks, "
             f"{len(rows)} reply/task pairs)", "",
             f"Mean reward: before ({result['version']['before']}) **{result['mean']['before']:.3f}**, "
             f"after ({INSTRUCTION_VERSION}) **{result['mean']['after']:.3f}**. "
             f"Gold responses scoring 1 after: {result['gold_responses_scoring_1']}; "
             f"{per_call_us:.0f} µs per call.", "",
             "| junk reply | before | after |", "| --- | --- | --- |"]
    lines += [f"| {k} `{JUNK[k]!r}` | {v['before']:.3f} | {v['after']:.3f} |".replace("<|", "<\\|").replace("|>", "\\|>")
              for k, v in result["by_junk"].items()]
    lines += ["", "| constraint | before | after |", "| --- | --- | --- |"]
    lines += [f"| {k} | {v['before']:.3f} | {v['after']:.3f} |" for k, v in result["by_constraint"].items()]
    (RESULTS / "instruction_degenerate.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
