"""Auto-rollback after a promotion (posttrain.registry.versus_production.evaluate_version(auto_rollback=True), the
`evaluate` flow's auto_rollback parameter, `posttrain evaluate VERSION --auto-rollback`).

The decision is tested on the fake registry of test_promotion with a stand-in evaluation (exact
per-item outcomes); then once end to end: real smoke world, real checkpoints, real evaluation, the
flow on a temporary Prefect server and the CLI.
"""
from __future__ import annotations

import json
import re
import shutil

import pytest
import yaml

from conftest import write_smoke_config
from posttrain import cli
from posttrain.evaluation import suites as evaluation
from posttrain.registry import promotion
from posttrain.registry.versus_production import compare, evaluate_version
from posttrain.registry.promotion import PromotionError
from posttrain.schema import EvalResult
from test_promotion import ACTOR, MODEL, migrated_db, new_registry, populate  # noqa: F401  (fixture)

pytestmark = pytest.mark.timeout(300)


def _result(math_right: int, truncated: int = 0, n: int = 100) -> EvalResult:
    math = [1.0] * math_right + [0.0] * (n - math_right)
    trunc = [1.0] * truncated + [0.0] * (n - truncated)
    return EvalResult(metrics={"math/accuracy": math_right / n, "math/truncation": truncated / n,
                               "mean_len_correct": 20.0},
                      per_item={"math/accuracy": math, "math/truncation": trunc})


@pytest.fixture
def fake(tmp_path, migrated_db, monkeypatch):  # noqa: F811
    """Fake registry (versions 1-5, 3 rejected) and a stand-in evaluation: version -> EvalResult."""
    reg = new_registry(tmp_path, migrated_db)
    populate(reg, tmp_path)
    results: dict[str, EvalResult] = {}
    seen: list[str] = []

    def fake_evaluate(ref, cfg, **kwargs):
        seen.append(ref.version)
        return results[ref.version]

    monkeypatch.setattr(evaluation, "evaluate", fake_evaluate)
    config = tmp_path / "ops.yaml"
    runs = tmp_path / "runs"
    config.write_text(yaml.safe_dump({"name": MODEL.removeprefix("posttrain-"), "paths": {
        "world": str(tmp_path / "data"), "runs": str(runs), "registry": str(reg.root),
        "data_store": str(runs / "data-store"), "dvc_remote": str(runs / "dvc-remote")}}))
    from posttrain.config.loading import load_config

    return reg, load_config(config), results, seen, str(config)


def test_compare_knows_truncation_is_worse_when_higher():
    rows = {r["metric"]: r for r in compare(_result(50, truncated=60), _result(50, truncated=10))}
    assert rows["math/truncation"]["diff"] == pytest.approx(0.5) and rows["math/truncation"]["low"] > 0
    assert rows["math/truncation"]["verdict"] == "worse"
    assert rows["math/accuracy"]["verdict"] == "same"
    rows = {r["metric"]: r for r in compare(_result(50, truncated=10), _result(50, truncated=60))}
    assert rows["math/truncation"]["verdict"] == "better"


def test_significant_regression_rolls_back_with_the_evidence(fake):
    reg, cfg, results, seen, _ = fake
    promotion.promote(reg, "2", actor=ACTOR)
    promotion.promote(reg, "4", actor=ACTOR)
    results.update({"4": _result(30, truncated=40), "2": _result(70, truncated=10)})
    out = evaluate_version(reg, cfg, "production", auto_rollback=True, actor=ACTOR)
    assert seen == ["4", "2"]  # production against the production before it
    assert (out["version"], out["against"], out["production"]) == ("4", "2", "4")
    assert [r["metric"] for r in out["regressions"]] == ["math/accuracy", "math/truncation"]
    entry = out["rollback"]
    assert (entry["action"], entry["from"], entry["to"], entry["actor"]) == ("auto-rollback", "4", "2", ACTOR)
    assert promotion.current_production(reg) == "2" == reg.alias("production")
    assert promotion.history(reg)[-1] == entry
    # the reason names every regressed capability with both values and the paired CI
    assert re.fullmatch(r"v4 significantly worse than v2 on "
                        r"math/accuracy 0\.300 vs 0\.700 \(diff -0\.400, 95% CI \[-0\.\d{3}, -0\.\d{3}\]\); "
                        r"math/truncation 0\.400 vs 0\.100 \(diff \+0\.300, 95% CI \[\+0\.\d{3}, \+0\.\d{3}\]\)",
                        entry["reason"]), entry["reason"]
    assert "mean_len_correct" not in entry["reason"]  # no per-item outcomes: no paired judgement


def test_no_significant_regression_keeps_production(fake):
    reg, cfg, results, _, _ = fake
    promotion.promote(reg, "2", actor=ACTOR)
    promotion.promote(reg, "4", actor=ACTOR)
    # 3 points lower on 100 items: inside the noise, not a regression
    results.update({"4": _result(67), "2": _result(70)})
    out = evaluate_version(reg, cfg, "4", auto_rollback=True, actor=ACTOR)
    row = next(r for r in out["comparison"] if r["metric"] == "math/accuracy")
    assert row["diff"] == pytest.approx(-0.03) and row["low"] < 0 < row["high"] and row["verdict"] == "same"
    assert out["regressions"] == [] and out["rollback"] is None
    assert [e["to"] for e in promotion.history(reg)] == ["2", "4"]


def test_auto_rollback_refuses_what_it_cannot_judge(fake):
    reg, cfg, results, seen, _ = fake
    promotion.promote(reg, "2", actor=ACTOR)
    with pytest.raises(ValueError, match="needs the actor"):  # the rollback would be recorded under nobody
        evaluate_version(reg, cfg, "2", auto_rollback=True)
    with pytest.raises(PromotionError, match="judges the production version; 4 is not production"):
        evaluate_version(reg, cfg, "4", auto_rollback=True, actor=ACTOR)
    with pytest.raises(PromotionError, match="needs the comparison"):
        evaluate_version(reg, cfg, "2", auto_rollback=True, against_production=False, actor=ACTOR)
    results["2"] = _result(10)
    out = evaluate_version(reg, cfg, "2", auto_rollback=True, actor=ACTOR)  # the first production ever
    assert out["against"] is None and out["rollback"] is None and seen == ["2"]


def test_a_promotion_during_the_evaluation_is_not_undone(fake, monkeypatch):
    reg, cfg, results, _, _ = fake
    promotion.promote(reg, "2", actor=ACTOR)
    promotion.promote(reg, "4", actor=ACTOR)
    results.update({"4": _result(30), "2": _result(70)})

    def evaluate_while_someone_promotes(ref, cfg, **kwargs):
        if ref.version == "2":  # the evaluation is slow; meanwhile an operator promotes 5
            promotion.promote(reg, "5", actor="operator@host")
        return results[ref.version]

    monkeypatch.setattr(evaluation, "evaluate", evaluate_while_someone_promotes)
    with pytest.raises(PromotionError, match="production moved from 4 to 5 meanwhile; not rolling back"):
        evaluate_version(reg, cfg, "4", auto_rollback=True, actor=ACTOR)
    assert [(e["action"], e["to"]) for e in promotion.history(reg)] == [("promote", "2"), ("promote", "4"),
                                                                       ("promote", "5")]


def test_cli_auto_rollback(fake, capsys):
    reg, _, results, _, config = fake
    promotion.promote(reg, "2", actor=ACTOR)
    promotion.promote(reg, "4", actor=ACTOR)
    results.update({"4": _result(30), "2": _result(70)})
    assert cli.main(["evaluate", "production", "--auto-rollback", "--config", config]) == 0
    out = capsys.readouterr().out
    assert "previous production v2" in out.splitlines()[0]
    assert re.search(r"^production: 4 -> 2 \(reasoning_rl\) \[auto-rollback by .*reason: v4 significantly worse "
                     r"than v2 on math/accuracy 0\.300 vs 0\.700", out, re.M), out
    assert cli.main(["evaluate", "production", "--auto-rollback", "--config", config]) == 0
    assert "nothing to roll back to" in capsys.readouterr().out  # 2 is the only production left
    assert cli.main(["evaluate", "1", "--auto-rollback", "--config", config]) == 2
    assert "not production" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def smoke_registry(tmp_path):
    """A smoke world and three registered real checkpoints, all gates passed:
    1: the smoke base with a generation config that ends every answer at once (truncation 0%),
       standing in for a healthy production;
    2: the smoke base as it is (runs into max_new_tokens on every math item: truncation 100%);
    3: version 1 plus a note file (another digest, the same answers)."""
    from posttrain.registry.checkpoint import directory_digest
    from posttrain.config.loading import load_config
    from posttrain.registry.model_registry import Registry
    from posttrain.schema import CheckpointRef, GateCheck, GateVerdict
    from posttrain.world.build import base_checkpoint, ensure_world
    from transformers import AutoTokenizer

    config = write_smoke_config(tmp_path)
    cfg = load_config(config)
    ensure_world(cfg)
    base = base_checkpoint(cfg)

    stops, plain, noted = (tmp_path / "checkpoints" / n for n in ("stops-at-once", "plain", "noted"))
    shutil.copytree(base.path, stops)
    generation = json.loads((stops / "generation_config.json").read_text())
    vocab = len(AutoTokenizer.from_pretrained(stops))
    generation["suppress_tokens"] = [i for i in range(vocab) if i != generation["eos_token_id"]]
    (stops / "generation_config.json").write_text(json.dumps(generation))
    shutil.copytree(base.path, plain)
    shutil.copytree(stops, noted)
    (noted / "NOTE.txt").write_text("same weights and generation config as stops-at-once")

    registry = Registry.for_config(cfg)
    for stage, path in (("general_rl", stops), ("distillation", plain), ("distillation", noted)):
        version = registry.register(stage, CheckpointRef(path=str(path), digest=directory_digest(path)),
                                    {"parent_version": "base"})
        registry.record_gate(version, GateVerdict(stage=stage, passed=True, checks=[
            GateCheck(name="math/format >= 0", value=0.0, threshold=0.0, passed=True)]))
    return registry, str(config)


@pytest.mark.slow   # a pipeline run and its rollback (about 45 s): make test-all and CI run it
def test_auto_rollback_end_to_end(harness, smoke_registry, capsys):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.serve import evaluate_flow

    registry, config = smoke_registry
    promotion.promote(registry, "1", actor=ACTOR)
    promotion.promote(registry, "2", reason="new distillation", actor=ACTOR)
    state = evaluate_flow(version="production", auto_rollback=True, config_path=config, return_state=True)
    assert state.is_completed(), state.message
    out = state.result()
    truncation = next(r for r in out["comparison"] if r["metric"] == "math/truncation")
    assert (truncation["new"], truncation["old"], truncation["verdict"]) == (1.0, 0.0, "worse")
    entry = promotion.history(registry)[-1]
    assert (entry["action"], entry["from"], entry["to"]) == ("auto-rollback", "2", "1")
    assert entry["actor"] == f"flow-run:{state.state_details.flow_run_id}"
    assert "math/truncation 1.000 vs 0.000 (diff +1.000, 95% CI [+1.000, +1.000])" in entry["reason"]
    assert promotion.current_production(registry) == "1" == registry.alias("production")
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(
            any_=["production-history"])))
    assert any("**auto-rollback**: 2 → **1**" in a.data for a in artifacts)

    # Same answers as the production before it: no regression, production stays.
    promotion.promote(registry, "3", actor=ACTOR)
    out = evaluate_flow(version="3", auto_rollback=True, config_path=config)
    assert out["against"] == "1" and out["regressions"] == [] and out["rollback"] is None
    assert promotion.current_production(registry) == "3"

    # The CLI, on the same real checkpoints.
    promotion.promote(registry, "2", actor=ACTOR)
    assert cli.main(["evaluate", "production", "--auto-rollback", "--config", config]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"^production: 2 -> 3 \(distillation\) \[auto-rollback by .*math/truncation 1\.000 vs 0\.000",
                     printed, re.M), printed
    assert [e["action"] for e in promotion.history(registry)] == [
        "promote", "promote", "auto-rollback", "promote", "promote", "auto-rollback"]
