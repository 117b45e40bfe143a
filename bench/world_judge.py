"""The embedded world's judge: a generative judge with a reference answer (Qwen3 sec. 4.4), trained
and measured.

The judge is the world's student base fine-tuned with the cold-start SFT recipe on
`data/world/judge_sft.jsonl` (posttrain.world.open_tasks.judge_rows: the judge prompt with the
question, the reference and the answer after the reply's thinking -> `[[10]]` or `[[0]]`, the world
checker's verdict on the whole reply; half right, half wrong). It is then asked, through the judge
reward's own client (posttrain.rewards.judge: the local generation engine, the verdict parser), about
the held-out suite's answers (`data/world/eval_judge.jsonl`: eval-partition operands and phrasings):

- **parse rate**: verdicts the parser reads (the issue asks >= 99%);
- **agreement** with the checker: accuracy and Cohen's kappa (>= 0.8), an unparsable verdict
  counted as a 0 (as the reward pays it).

    .venv/bin/python bench/world_judge.py [--base data/student_base] [--out data/judge]

Writes the judge to `--out`; with `--record`, its measures to bench/results/world_judge.json.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posttrain.data.files import file_md5, read_jsonl  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def cohen_kappa(truth: list[int], said: list[int]) -> float:
    n = len(truth)
    observed = sum(t == s for t, s in zip(truth, said)) / n
    p_truth, p_said = sum(truth) / n, sum(said) / n
    expected = p_truth * p_said + (1 - p_truth) * (1 - p_said)
    return 1.0 if expected == 1 else (observed - expected) / (1 - expected)


def train_judge(base: Path, rows_path: Path, out: Path, *, learning_rate: float, epochs: float, seed: int,
                threads: int = 2) -> dict:
    """The cold-start SFT recipe on the judge rows, from `base`; the checkpoint copied to `out`."""
    from posttrain.config.pipeline import ColdStartSFTConfig, PipelineConfig
    from posttrain.schema import CheckpointRef, DatasetRef, StageInputs
    from posttrain.config.trainers import SFTTrainerConfig
    from stages import cold_start_sft

    with tempfile.TemporaryDirectory() as work:
        inputs = StageInputs(work_dir=work, seed=seed, model=PipelineConfig().base.settings(),
                             parent=CheckpointRef(path=str(base.absolute()), digest="world-student-base"),
                             data={"cold_start": DatasetRef(name="judge_sft", path=str(rows_path), md5=file_md5(rows_path))})
        config = ColdStartSFTConfig(trainer=SFTTrainerConfig(learning_rate=learning_rate, epochs=epochs, batch_size=16,
                                                            max_length=320, threads=threads))
        result = cold_start_sft.run(config, inputs)
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(result.checkpoint.path, out)
        return {"wall_s": result.wall_s, **result.train_metrics}


def measure(judge_dir: Path, rows: list[dict]) -> dict:
    """The judge asked as the `judge` reward asks it (Judge.verdicts on the local engine)."""
    from posttrain.config.pipeline import EvaluationConfig, PipelineConfig
    from posttrain.rewards.judge import Judge, LocalClient
    from posttrain.world.open_tasks import JUDGE_MAX_NEW_TOKENS, JUDGE_TEMPLATE

    client = LocalClient(str(judge_dir), PipelineConfig().base.settings(), EvaluationConfig(backend="hf"),
                         max_new_tokens=JUDGE_MAX_NEW_TOKENS, batch_size=64)
    started = time.time()
    verdicts = Judge(client, JUDGE_TEMPLATE, deadline_s=3600).verdicts(
        *([r["judged"][part] for r in rows] for part in ("question", "reference", "response")))
    truth = [int(r["verdict"] == 1.0) for r in rows]
    said = [int(score >= 0.5) for score, _ in verdicts]
    wrong = [r["judged"]["response"] for r, s, v in zip(rows, said, truth) if s != v]
    return {"items": len(rows), "right_share": sum(truth) / len(truth), "wall_s": time.time() - started,
            "parse_rate": sum(reason == "judged" for _, reason in verdicts) / len(verdicts),
            "accuracy": sum(t == s for t, s in zip(truth, said)) / len(truth), "kappa": cohen_kappa(truth, said),
            "disagreements": wrong[:12]}


def markdown(result: dict) -> str:
    held, training = result["held_out"], result["training"]
    return "\n".join([
        f"# The embedded world's judge ({time.strftime('%Y-%m-%d')})", "",
        f"`python bench/world_judge.py`: the student base ({result['base']}) fine-tuned with the cold-start "
        f"recipe on {result['training_rows']} judge rows ({result['epochs']} epochs, lr {result['learning_rate']}, "
        f"seed {result['seed']}, {training['wall_s']:.0f} s), asked through the `judge` reward's client (local hf "
        f"engine, greedy) about {held['items']} held-out answers ({held['right_share']:.0%} right by the world's checker).", "",
        "| measure | value | issue asks |", "|---|---|---|",
        f"| parse rate (a `[[n]]` verdict read) | {held['parse_rate']:.3f} | >= 0.99 |",
        f"| agreement with the checker (an unparsable verdict counted as 0) | {held['accuracy']:.3f} | – |",
        f"| Cohen's kappa against the checker | {held['kappa']:.3f} | >= 0.8 |",
        f"| judging wall time ({held['items']} items) | {held['wall_s']:.1f} s | – |", "",
        "Disagreements (the answer judged): " + (", ".join(f"`{d}`" for d in held["disagreements"]) or "none"), ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default=str(ROOT / "data" / "student_base"))
    parser.add_argument("--out", default=str(ROOT / "data" / "judge"))
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (1 beside another training)")
    parser.add_argument("--record", action="store_true",
                        help="write bench/results/world_judge.json (world_judge.md keeps the table of runs)")
    args = parser.parse_args()
    world = ROOT / "data" / "world"
    out = Path(args.out)
    training = train_judge(Path(args.base), world / "judge_sft.jsonl", out, learning_rate=args.learning_rate,
                           epochs=args.epochs, seed=args.seed, threads=args.threads)
    held = measure(out, read_jsonl(world / "eval_judge.jsonl"))
    result = {"base": args.base, "learning_rate": args.learning_rate, "epochs": args.epochs, "seed": args.seed,
              "training_rows": len(read_jsonl(world / "judge_sft.jsonl")), "training": training, "held_out": held}
    print(markdown(result))
    if args.record:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "world_judge.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
