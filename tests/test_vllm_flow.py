"""The flow end to end with `backend: vllm`, on vLLM's CPU build: the smoke world's chain over
cold-start SFT and rejection sampling, every evaluation and rejection sampling's generation written
by vLLM's engine over the stage's checkpoint; the gates judge, the registry records, the report card
is written as on the hf loop.

Runs where the engines extra is installed (`python scripts/install.py --engines cpu`, CI's engine
step); without vLLM it skips. Three engine starts (~40 s each): base, cold start, rejection sampling
(its checkpoint is the cold start's, whose evaluation is reused)."""
from __future__ import annotations

import json

import pytest
import yaml

pytest.importorskip("vllm", reason="vLLM is not installed: python scripts/install.py --engines cpu")
pytestmark = [pytest.mark.engines, pytest.mark.timeout(1800)]

from conftest import write_smoke_config  # noqa: E402


def test_the_chain_over_two_stages_generates_and_evaluates_on_vllm(tmp_path, monkeypatch):
    from prefect.testing.utilities import prefect_test_harness

    from flows.pipeline import pipeline
    from posttrain.generation import engines as generation

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    config = write_smoke_config(tmp_path)
    raw = yaml.safe_load(config.read_text())
    raw["evaluation"]["backend"] = "vllm"
    raw["stages"]["rejection_sampling"]["backend"] = "vllm"
    config.write_text(yaml.safe_dump(raw))

    loaded: list[str] = []
    real_load = generation.VLLMEngine.load.__func__

    def load(cls, checkpoint, settings, engine, seed=0):
        loaded.append(str(getattr(checkpoint, "path", checkpoint)))
        return real_load(cls, checkpoint, settings, engine, seed)

    monkeypatch.setattr(generation.VLLMEngine, "load", classmethod(load))
    with prefect_test_harness(server_startup_timeout=120):
        state = pipeline(config_path=str(config), stages=["cold_start_sft", "rejection_sampling"], return_state=True)
    assert state.is_completed(), state.message
    report = json.loads(next((tmp_path / "runs").glob("*/report.json")).read_text())
    stages = {s["name"]: s for s in report["stages"]}
    cold_start = stages["cold_start_sft"]["checkpoint"]["path"]
    assert loaded.count(cold_start) == 2, loaded            # its evaluation, then rejection sampling's generation
    assert stages["base"]["checkpoint"]["path"] in loaded   # the base's evaluation
    assert len(loaded) == 3, loaded
    for name in ("base", "cold_start_sft"):
        assert 0 <= stages[name]["eval"]["math/accuracy"] <= 1 and stages[name]["eval"]["math/format"] >= 0
    assert stages["cold_start_sft"]["status"] == "passed" and stages["rejection_sampling"]["status"] == "passed"
    # the engine's samples came back and were judged: the verdicts' shares add up to every sample drawn
    metrics = stages["rejection_sampling"]["train_metrics"]
    total = metrics["prompts"] * raw["stages"]["rejection_sampling"]["samples_per_prompt"]
    refused = sum(v for k, v in metrics.items() if k.startswith("rejected/"))
    assert total > 0 and abs(metrics["acceptance_rate"] - (total - refused) / total) < 1e-9, metrics
    assert metrics["kept_rows"] <= total - refused, metrics
