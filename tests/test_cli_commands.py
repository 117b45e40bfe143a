"""The README's `posttrain run` commands on the smoke config: `--stages` (only those run, the others
reported skipped), `--force` (cached stages recomputed) and `--on-gate-failure continue` (what
`make run` uses: a failed gate does not stop the chain, the command exits non-zero and the
checkpoint is tagged rejected).  Called through the command's own entry point, in this process,
against one Prefect test server and one smoke project for the whole module.

(`posttrain verify` runs as a real process reading JSONL on stdin in tests/test_verify_cli.py and
tests/test_math_verifier.py; status, promote, rollback, history, lineage, evaluate and resume in
tests/test_cli_ops.py.)
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from posttrain import cli
from posttrain.config.pipeline import STAGES
from test_pipeline import prefect_harness, smoke_project  # noqa: F401  (fixtures: one server, one project)

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]  # make test-all and CI run it


def posttrain(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def latest_report(project: Path) -> tuple[Path, dict[str, dict]]:
    """The newest run's folder and its report's stages by name (in order)."""
    path = max((project / "runs").glob("*/report.json"), key=lambda p: p.stat().st_mtime)
    return path.parent, {s["name"]: s for s in json.loads(path.read_text())["stages"]}


def ran(run_dir: Path, stage: str) -> bool:
    """Whether the stage's work started in this run (its attempt marker), rather than coming from the cache."""
    return (run_dir / stage / "attempt.json").is_file()


def test_run_stages_runs_only_those_and_reports_the_others_skipped(prefect_harness, smoke_project, capsys):
    project = smoke_project
    config = str(project / "smoke.yaml")
    code, out, err = posttrain(capsys, "run", "--config", config, "--stages", "cold_start_sft", "reasoning_rl")
    assert code == 0, err
    run_dir, stages = latest_report(project)
    assert f"report: {run_dir / 'report.md'}" in out
    chain = [name for name in STAGES if name != "reward_model"]   # no preference data: no reward model stage
    assert list(stages) == ["base", *chain]
    selected = ("cold_start_sft", "reasoning_rl")
    for name in chain:
        want = "passed" if name in selected else "skipped"
        assert stages[name]["status"] == want, (name, stages[name])
        assert ran(run_dir, name) is (name in selected), name
    assert "| status | passed | passed | passed | skipped | skipped | skipped | skipped |\n" in \
        (run_dir / "report.md").read_text()


def test_run_force_recomputes_cached_stages(prefect_harness, smoke_project, capsys):
    project = smoke_project
    config = str(project / "smoke.yaml")
    for _ in range(2):  # the second run at the latest finds cold_start_sft (and base's evaluation) cached
        code, _, err = posttrain(capsys, "run", "--config", config, "--stages", "cold_start_sft")
        assert code == 0, err
    run_dir, stages = latest_report(project)
    assert stages["base"]["cached"] and stages["cold_start_sft"]["cached"]
    assert not ran(run_dir, "cold_start_sft")
    cached_digest = stages["cold_start_sft"]["checkpoint"]["digest"]

    code, _, err = posttrain(capsys, "run", "--config", config, "--stages", "cold_start_sft", "--force")
    assert code == 0, err
    forced_dir, forced = latest_report(project)
    assert forced_dir != run_dir
    assert forced["cold_start_sft"]["status"] == "passed" and forced["cold_start_sft"]["cached"] is False
    assert forced["base"]["cached"] is False  # the evaluation too
    assert ran(forced_dir, "cold_start_sft")
    assert forced["cold_start_sft"]["checkpoint"]["path"] != stages["cold_start_sft"]["checkpoint"]["path"]
    # the same inputs train the same weights: recomputed, not changed
    assert forced["cold_start_sft"]["checkpoint"]["digest"] == cached_digest


def test_on_gate_failure_continue_runs_on_exits_non_zero_and_rejects_the_checkpoint(prefect_harness, smoke_project,
                                                                                     capsys):
    project = smoke_project
    assert "posttrain run --config configs/default.yaml --on-gate-failure continue" in (ROOT / "Makefile").read_text()
    cfg = yaml.safe_load((project / "smoke.yaml").read_text())
    cfg["stages"]["cold_start_sft"]["gate"] = {"targets": [{"metric": "math/format", "min": 1.01}], "regression": []}
    strict = project / "strict.yaml"
    strict.write_text(yaml.safe_dump(cfg))
    chain = ("--config", str(strict), "--stages", "cold_start_sft", "reasoning_rl")

    code, _, err = posttrain(capsys, "run", *chain)  # the default, stop: the chain ends at the failed gate
    assert code == 1 and "gate of cold_start_sft failed" in err, err
    _, stopped = latest_report(project)
    assert stopped["cold_start_sft"]["status"] == "failed" and "reasoning_rl" not in stopped

    code, out, err = posttrain(capsys, "run", *chain, "--on-gate-failure", "continue")
    assert code == 1 and "gate of cold_start_sft failed" in err, err
    assert "run id:" not in out
    run_dir, stages = latest_report(project)
    assert stages["cold_start_sft"]["status"] == "failed"
    assert stages["reasoning_rl"]["status"] == "passed"  # the chain went on past the failed gate
    # deselected stages get a skipped column; the reward model stage, with no preference data, is not in the chain
    assert "reward_model" not in stages
    assert [stages[n]["status"] for n in STAGES[2:] if n != "reward_model"] == ["skipped"] * 4
    assert (run_dir / "report.md").is_file()

    from posttrain.registry.model_registry import Registry

    registry = Registry(project / "runs" / "registry", model_name="posttrain-smoke")
    rejected = registry.get(stages["cold_start_sft"]["checkpoint"]["version"])
    assert rejected["tags"]["gate"] == "failed" and rejected["tags"]["status"] == "rejected"
    assert stages["reasoning_rl"]["gate"]["passed"]  # judged on its own, after the rejected parent
