"""RL stages resume inside the stage: a rerun over the same work folder continues from the last
trainer checkpoint (step count, optimizer, RNG and the adaptive sampler's state) instead of step 0,
and trains on exactly the batches an uninterrupted run trains on, to the same weights."""
import json
from dataclasses import dataclass

import pytest
from transformers import TrainerCallback

from conftest import write_smoke_config

pytestmark = pytest.mark.timeout(600)

# Weights of a resumed run may differ from an uninterrupted run's by this much (float32 on CPU:
# the same operations in the same order, so in practice they are bitwise equal).
WEIGHT_TOLERANCE = 1e-6
PROMPTS = 6  # 3 batches of 2 prompts per pass over the problems: 7 steps cross two passes


def _tiny_model(tokenizer):
    from posttrain.world.model import Architecture, build_model

    return build_model(Architecture(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                    intermediate_size=64), tokenizer, seed=0)


class Killed(Exception):
    """Stands for the process dying after a checkpoint was written, while the next step starts."""


class KillAfter(TrainerCallback):
    def __init__(self, step: int):
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        # The dataloader has already drawn this step's batch and the next one: what a kill loses.
        if state.global_step == self.step:
            raise Killed


@dataclass
class Run:
    generations: list  # (global step, problem of each group) per generated batch
    weights: dict
    optimizer: list
    rng: object
    killed: bool


def digits_reward(stats, generations: list):
    """Pays for the share of digits: a random model writes a few, so groups differ, gradients are
    non-zero and the prioritized sampler sees success rates move. Records (step, problem of each
    group) in `generations`."""
    def digits(completions, problem_index, trainer_state, **_):
        rewards = [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]
        stats.record(list(problem_index), rewards, 2, [len(c) for c in completions], ["digits"] * len(rewards))
        generations.append((trainer_state.global_step, list(problem_index[::2])))
        return rewards
    return digits


def _train(tokenizer, work, strategy: str, num_iterations: int, *, max_steps: int = 7, kill_after: int = 0) -> Run:
    """An RL run the way the stages drive the trainer (reasoning RL: our sampler with `strategy`,
    restored before training from the last checkpoint; general RL, strategy "trl": TRL's shuffled
    order), on a tiny random model whose reward varies within groups."""
    import torch
    from datasets import Dataset

    from posttrain.config.trainers import GRPOTrainerConfig
    from posttrain.config.rl import ProblemSamplingConfig
    from posttrain.rl.sampling import ProblemStats
    from posttrain.rl.trainer import StageGRPOTrainer
    from posttrain.training.trainers import grpo_args, resume_point

    stats = ProblemStats([f"b{i % 2}" for i in range(PROMPTS)])
    generations = []
    digits = digits_reward(stats, generations)

    cfg = GRPOTrainerConfig(max_steps=max_steps, prompts_per_step=2, num_generations=2, max_completion_length=8,
                            save_steps=1, learning_rate=1e-2, num_iterations=num_iterations,
                            mask_truncated_completions=False)
    common = dict(model=_tiny_model(tokenizer), reward_funcs=[digits], processing_class=tokenizer,
                  args=grpo_args(cfg, work, 0, [1.0]),
                  train_dataset=Dataset.from_list([{"prompt": f"{i}+{i}=", "problem_index": i} for i in range(PROMPTS)]))
    checkpoint = resume_point(work)
    if strategy == "trl":
        trainer = StageGRPOTrainer(**common)
    else:
        trainer = StageGRPOTrainer(**common, sampling=ProblemSamplingConfig(strategy=strategy),
                                   difficulty=[1] * PROMPTS, problem_stats=stats)
        trainer.restore_sampler(checkpoint)
    if kill_after:
        trainer.add_callback(KillAfter(kill_after))
    try:
        trainer.train(resume_from_checkpoint=checkpoint)
    except Killed:
        return Run(generations, {}, [], None, killed=True)
    return Run(generations, {k: v.detach().clone() for k, v in trainer.model.state_dict().items()},
               [s["exp_avg_sq"].clone() for s in trainer.optimizer.state_dict()["state"].values()],
               torch.get_rng_state(), killed=False)


@pytest.mark.parametrize("strategy, num_iterations, kill_after", [
    ("uniform", 1, 4), ("prioritized", 1, 4), ("trl", 1, 4),
    # Killed between two generations: steps 3 and 4 train on one batch of rollouts.
    ("prioritized", 2, 3), ("trl", 2, 3)])
def test_a_killed_and_resumed_run_trains_on_the_batches_of_an_uninterrupted_one(
        tokenizer, tmp_path, strategy, num_iterations, kill_after):
    import torch

    straight = _train(tokenizer, tmp_path / "straight", strategy, num_iterations)
    first = _train(tokenizer, tmp_path / "killed", strategy, num_iterations, kill_after=kill_after)
    resumed = _train(tokenizer, tmp_path / "killed", strategy, num_iterations)

    assert first.killed and not resumed.killed
    assert [g[0] for g in straight.generations] == list(range(0, 7, num_iterations))
    # The batch schedule: the same problems, in the same order, generated for at the same steps.
    assert first.generations == [g for g in straight.generations if g[0] < kill_after]
    assert resumed.generations == [g for g in straight.generations if g[0] >= kill_after]

    initial = _tiny_model(tokenizer).state_dict()
    moved = max((straight.weights[k] - initial[k]).abs().max().item() for k in initial)
    assert moved > 1000 * WEIGHT_TOLERANCE  # the rewards train the model: a different batch would show
    for name, weight in straight.weights.items():
        torch.testing.assert_close(resumed.weights[name], weight, rtol=0, atol=WEIGHT_TOLERANCE, msg=name)
    for ours, theirs in zip(resumed.optimizer, straight.optimizer, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=WEIGHT_TOLERANCE)
    assert torch.equal(resumed.rng, straight.rng)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    from posttrain.config.loading import load_config
    from posttrain.world.build import ensure_world

    root = tmp_path_factory.mktemp("rl-resume")
    cfg = load_config(write_smoke_config(root))
    ensure_world(cfg)
    return root, cfg


def _run(smoke, work, **trainer):
    from posttrain.config.loading import load_config
    from posttrain.data.prepared import prepare
    from posttrain.schema import StageInputs
    from posttrain.world.build import base_checkpoint
    from stages import reasoning_rl

    root, _ = smoke
    overrides = {f"stages.reasoning_rl.trainer.{k}": v for k, v in trainer.items()}
    overrides["stages.reasoning_rl.sampling.strategy"] = "prioritized"
    cfg = load_config(root / "smoke.yaml", overrides=overrides)
    data = prepare(cfg, root / "prepared", ("reasoning_rl",))
    return reasoning_rl.run(cfg.stage("reasoning_rl"), StageInputs(
        work_dir=str(work), data=data.for_stage("reasoning_rl"), model=cfg.base.settings(),
        parent=base_checkpoint(cfg), seed=0,
        data_store=str(cfg.path(cfg.paths.data_store)), dvc_remote=str(cfg.path(cfg.paths.dvc_remote))))


def test_rerun_continues_from_the_last_trainer_checkpoint_with_the_sampler_state(smoke, tmp_path, monkeypatch):
    from posttrain.rl.trainer import StageGRPOTrainer

    generated_at, problems = [], []
    original = StageGRPOTrainer._generate_and_score_completions

    def counting(self, inputs):
        generated_at.append(self.state.global_step)
        problems.append([row["problem_index"] for row in inputs[::self.num_generations]])
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

    # The same stage run in one go trains on the same problems, in the same order.
    resumed_problems = problems[:]
    _run(smoke, tmp_path / "straight", max_steps=4, save_steps=1)
    assert resumed_problems == problems[4:]


def test_kl_to_the_starting_policy_is_logged_at_beta_zero_and_survives_a_resume(smoke, tmp_path, monkeypatch):
    import torch

    from posttrain.rl.trainer import StageGRPOTrainer

    # The smoke parent earns no reward, so RL would leave it unchanged: move the policy by hand
    # after every training step instead (the optimizer adds nothing to zero gradients).
    original = StageGRPOTrainer.training_step

    def drifting(self, model, inputs, num_items_in_batch=None):
        loss = original(self, model, inputs, num_items_in_batch)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.01 * torch.randn_like(parameter))
        return loss

    monkeypatch.setattr(StageGRPOTrainer, "training_step", drifting)

    # Smoke completions are all cut at the length limit: keep them in the loss, and so in the KL.
    drift = dict(save_steps=1, beta=0.0, mask_truncated_completions=False)

    def kls(result):
        return {row["step"]: row["kl"] for row in result.train_log if "kl" in row}

    straight = kls(_run(smoke, tmp_path / "straight", max_steps=3, **drift))
    assert straight[1] == 0.0   # the first batch is generated by the starting policy itself
    assert 0.0 < straight[2] < straight[3]

    work = tmp_path / "resumed"
    _run(smoke, work, max_steps=2, **drift)
    resumed = kls(_run(smoke, work, max_steps=3, **drift))
    # Step 3's rollouts come from the checkpoint the rerun resumed from: measured against that
    # checkpoint the drift would be exactly 0; measured from the stage's starting policy it is not.
    assert resumed[3] > 0.0

    assert not kls(_run(smoke, tmp_path / "off", max_steps=1, **drift, monitor_kl=False))
