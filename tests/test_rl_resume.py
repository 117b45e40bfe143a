"""Reasoning RL resumes inside the stage: a rerun over the same work folder continues from the last
trainer checkpoint (step count, optimizer and the adaptive sampler's state) instead of step 0."""
import json

import pytest

from conftest import write_smoke_config

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    from posttrain.config import load_config
    from posttrain.world.build import ensure_world

    root = tmp_path_factory.mktemp("rl-resume")
    cfg = load_config(write_smoke_config(root))
    ensure_world(cfg)
    return root, cfg


def _run(smoke, work, **trainer):
    from posttrain.config import load_config
    from posttrain.schema import StageInputs
    from posttrain.world.build import base_checkpoint
    from stages import reasoning_rl

    root, _ = smoke
    overrides = {f"stages.reasoning_rl.trainer.{k}": v for k, v in trainer.items()}
    overrides["stages.reasoning_rl.sampling.strategy"] = "prioritized"
    cfg = load_config(root / "smoke.yaml", overrides=overrides)
    return reasoning_rl.run(cfg.stage("reasoning_rl"), StageInputs(
        work_dir=str(work), world_dir=str(cfg.path(cfg.paths.world)), parent=base_checkpoint(cfg), seed=0))


def test_rerun_continues_from_the_last_trainer_checkpoint_with_the_sampler_state(smoke, tmp_path, monkeypatch):
    from posttrain.rl import StageGRPOTrainer

    generated_at = []
    original = StageGRPOTrainer._generate_and_score_completions

    def counting(self, inputs):
        generated_at.append(self.state.global_step)
        return original(self, inputs)

    monkeypatch.setattr(StageGRPOTrainer, "_generate_and_score_completions", counting)
    work = tmp_path / "reasoning_rl"
    first = _run(smoke, work, max_steps=2, save_steps=1)
    assert generated_at == [0, 1]
    assert first.policies["resumed_from"] == ""
    saved = json.loads((work / "trainer" / "checkpoint-2" / "problem_sampler.json").read_text())
    assert saved["stats"]["groups_scored"] == 2 * 2  # 2 steps x 2 prompts scored before the save

    second = _run(smoke, work, max_steps=4, save_steps=1)
    assert second.policies["resumed_from"].endswith("checkpoint-2")
    assert generated_at == [0, 1, 2, 3]  # the rerun generated only for steps 3 and 4
    state = json.loads((work / "trainer" / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    steps = [row["step"] for row in second.train_log if "loss" in row]
    assert steps == [1.0, 2.0, 3.0, 4.0]  # history carried over, steps 3-4 newly trained, no replay
    resumed = json.loads((work / "trainer" / "checkpoint-4" / "problem_sampler.json").read_text())
    assert resumed["stats"]["groups_scored"] == 4 * 2  # the sampler went on, it did not start over
    assert resumed["stats"]["visits"] != saved["stats"]["visits"]
