"""Problem sampling for reasoning RL: success tracking, prioritized / curriculum / uniform draws,
dropped zero-signal groups, and sampler state that survives a resume."""
from __future__ import annotations

import collections

import pytest

from posttrain.config.pipeline import ConfigError
from posttrain.config.rl import ProblemSamplingConfig
from posttrain.config.loading import load_config
from posttrain.rewards import correctness
from posttrain.rl.sampling import ProblemSampler, ProblemStats
from posttrain.rl.rewards import tracked


def sampler(buckets, levels=None, *, prompts=4, generations=2, repeat=1, total=100, seed=0, **cfg):
    stats = ProblemStats(buckets)
    return ProblemSampler(levels or [1] * len(buckets), stats, ProblemSamplingConfig(**cfg),
                          prompts_per_batch=prompts, num_generations=generations, repeat_count=repeat,
                          total_batches=total, seed=seed)


def test_group_outcomes_and_batch_statistics_are_recorded():
    stats = ProblemStats(["a", "a", "b"])
    stats.record([0, 0, 2, 2, 1, 1], [1.0, 1.0, 0.0, 0.0, 1.0, 0.0], 2, [10, 20, 30, 40, 50, 60],
                 ["match", "match", "no_box", "mismatch", "match", "mismatch"])
    assert stats.last_batch["groups/all_correct"] == pytest.approx(1 / 3)
    assert stats.last_batch["groups/all_wrong"] == pytest.approx(1 / 3)
    assert stats.last_batch["groups/mixed"] == pytest.approx(1 / 3)
    assert stats.last_batch["length/correct"] == pytest.approx((10 + 20 + 50) / 3)
    assert stats.last_batch["length/wrong"] == pytest.approx((30 + 40 + 60) / 3)
    assert stats.last_batch["tokens_per_correct"] == pytest.approx(210 / 3)
    assert stats.last_batch["verifier/no_box"] == pytest.approx(1 / 6)
    assert stats.own[0] == 1.0 and stats.own[2] == 0.0 and stats.own[1] == 0.5
    assert stats.visits == [1, 1, 1]


def test_unvisited_problem_takes_its_buckets_running_rate():
    stats = ProblemStats(["easy", "easy", "hard", "hard"], prior=0.5)
    for _ in range(30):
        stats.record([0, 0, 2, 2], [1.0, 1.0, 0.0, 0.0], 2, [1] * 4, ["match"] * 4)
    success = stats.success
    assert success[1] > 0.9 and success[3] < 0.1  # never visited, judged by their bucket


def test_prioritized_sampling_favours_failing_problems_and_keeps_a_floor():
    buckets = ["solved"] * 50 + ["failing"] * 50
    s = sampler(buckets, strategy="prioritized", floor=0.2, prompts=1, generations=1)
    s.stats.bucket_rate = {"solved": 1.0, "failing": 0.0}
    counts = collections.Counter(buckets[s.next_batch()[0]] for _ in range(2000))
    # P(failing) = 0.8 * 1 + 0.2 * 0.5 = 0.9; solved problems still drawn at the floor (0.1).
    assert counts["failing"] / 2000 == pytest.approx(0.9, abs=0.03)
    assert counts["solved"] > 120


def test_uniform_sampling_is_a_shuffled_pass_with_each_prompt_repeated_for_its_group():
    s = sampler(["x"] * 8, prompts=4, generations=3, repeat=2)
    stream = list(s)
    assert len(stream) == len(s) == 2 * 4 * 3 * 2
    first_batch = stream[:4 * 3]
    assert stream[4 * 3:2 * 4 * 3] == first_batch  # repeat_count: the same generation batch again
    assert all(first_batch[i] == first_batch[i - i % 3] for i in range(len(first_batch)))
    assert sorted(set(stream)) == list(range(8))


def test_curriculum_opens_harder_levels_as_training_progresses():
    levels = [1] * 20 + [2] * 20
    s = sampler(["b"] * 40, levels, curriculum=True, curriculum_fraction=0.5, total=10)
    early = {levels[i] for _ in range(2) for i in s.next_batch()}
    for _ in range(6):
        s.next_batch()
    late = {levels[i] for _ in range(4) for i in s.next_batch()}
    assert early == {1}
    assert 2 in late


def test_problems_whose_last_group_was_uniform_are_skipped_but_not_forgotten():
    buckets = ["b"] * 10
    s = sampler(buckets, prompts=1, generations=1, drop_uniform_groups=True, floor=0.05)
    s.stats.record(list(range(9)), [1.0] * 9, 1, [1] * 9, ["match"] * 9)  # problems 0-8 all-correct
    draws = collections.Counter(s.next_batch()[0] for _ in range(1000))
    # Weights: 1 for the unvisited problem, floor = 0.05 for each of the nine: P(9) = 1 / 1.45.
    assert draws[9] / 1000 == pytest.approx(1 / 1.45, abs=0.05)
    assert sum(draws[i] for i in range(9)) > 200


def test_sampler_state_round_trip_continues_the_same_draws():
    a = sampler(["p"] * 30 + ["q"] * 30, strategy="prioritized", seed=3)
    a.stats.record([0, 0, 40, 40], [1.0, 1.0, 0.0, 1.0], 2, [5] * 4, ["match"] * 4)
    for _ in range(3):
        a.next_batch()
    saved = a.state_dict()
    expected = [a.next_batch() for _ in range(5)]
    b = sampler(["p"] * 30 + ["q"] * 30, strategy="prioritized", seed=99)
    b.load_state_dict(saved)
    assert [b.next_batch() for _ in range(5)] == expected
    assert b.batches_drawn == a.batches_drawn


def test_state_for_another_problem_set_is_refused_with_a_reason():
    a = sampler(["p"] * 10)
    b = sampler(["p"] * 12)
    with pytest.raises(ValueError, match="problem set changed"):
        b.load_state_dict(a.state_dict())


def test_tracked_correctness_scores_records_and_logs():
    stats = ProblemStats(["a", "b"])
    logged = {}
    reward = tracked(correctness, stats, num_generations=2)
    out = reward(completions=["<think>x</think>\\boxed{4}", "\\boxed{5}", "no box", "\\boxed{7}"],
                 answer=["4", "4", "7", "7"], problem_index=[0, 0, 1, 1],
                 completion_ids=[[1] * 3, [1] * 5, [1] * 7, [1] * 9], log_metric=logged.__setitem__)
    assert reward.__name__ == "correctness"  # TRL names the reward column after it
    assert out == [1.0, 0.0, 0.0, 1.0]
    assert stats.visits == [1, 1]
    assert logged["groups/mixed"] == 1.0
    assert logged["verifier/no_box"] == 0.25
    assert logged["length/correct"] == 6.0


def test_unknown_sampling_strategy_is_a_config_error_naming_the_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("stages:\n  reasoning_rl:\n    sampling: {strategy: greedy}\n")
    with pytest.raises(ConfigError, match=r"stages\.reasoning_rl\.sampling\.strategy"):
        load_config(path)


def test_alerts_fire_once_per_kind_with_the_step_and_the_bound():
    from posttrain.config.rl import RLAlertsConfig
    from posttrain.rl.alerts import RLAlerts

    seen = []
    alerts = RLAlerts(RLAlertsConfig(kl_max=0.1, zero_reward_steps=2, truncation_max=0.3, uniform_groups_max=0.8),
                      log=seen.append)
    state = type("State", (), {"global_step": 0})()
    for step, logs in enumerate([{"reward": 0.0, "kl": 0.05}, {"reward": 0.0, "kl": 0.2},
                                 {"reward": 0.0, "completions/clipped_ratio": 0.5, "frac_reward_zero_std": 0.95},
                                 {"reward": 1.0, "kl": 0.3}], start=1):
        state.global_step = step
        alerts.on_log(None, state, None, logs=logs)
    kinds = [(a["kind"], a["step"]) for a in alerts.fired]
    assert kinds == [("kl", 2), ("zero_reward", 2), ("truncation", 3), ("uniform_groups", 3)]
    assert "alerts.kl_max 0.1" in alerts.fired[0]["message"]
    assert len(seen) == 4  # the second KL excess (step 4) is not repeated


def test_logprob_mismatch_alerts_on_async_and_vllm_rollouts():
    from posttrain.config.rl import RLAlertsConfig
    from posttrain.rl.alerts import RLAlerts

    alerts = RLAlerts(RLAlertsConfig(logprob_mismatch_max=0.1), log=lambda _: None)
    state = type("State", (), {"global_step": 0})()
    for step, logs in enumerate([{"rollout/is_ratio/abs_log_diff": 0.05}, {"sampling/sampling_logp_difference/mean": 0.3},
                                 {"rollout/is_ratio/abs_log_diff": 0.4}], start=1):
        state.global_step = step
        alerts.on_log(None, state, None, logs=logs)
    assert [(a["kind"], a["step"]) for a in alerts.fired] == [("logprob_mismatch", 2)]
    assert "alerts.logprob_mismatch_max 0.1" in alerts.fired[0]["message"]
    quiet = RLAlerts(RLAlertsConfig(logprob_mismatch_max=None), log=lambda _: None)
    quiet.on_log(None, state, None, logs={"rollout/is_ratio/abs_log_diff": 5.0})
    assert quiet.fired == []


def test_fail_action_and_non_finite_loss_stop_training():
    from posttrain.config.rl import RLAlertsConfig
    from posttrain.rl.alerts import RLAlerts, TrainingAlert

    state = type("State", (), {"global_step": 7})()
    with pytest.raises(TrainingAlert, match="loss is nan at step 7"):
        RLAlerts(RLAlertsConfig()).on_log(None, state, None, logs={"loss": float("nan")})
    with pytest.raises(TrainingAlert, match="truncation rate 0.90"):
        RLAlerts(RLAlertsConfig(action="fail")).on_log(None, state, None, logs={"completions/clipped_ratio": 0.9})


def test_checkpoint_without_sampler_state_resumes_with_a_warning(tmp_path):
    from posttrain.rl.trainer import StageGRPOTrainer

    trainer = StageGRPOTrainer.__new__(StageGRPOTrainer)  # only restore_sampler is exercised
    trainer.problem_sampler = sampler(["p"] * 4)
    (tmp_path / "checkpoint-3").mkdir()
    with pytest.warns(UserWarning, match="fresh problem sampler"):
        assert trainer.restore_sampler(str(tmp_path / "checkpoint-3")) is False
    assert trainer.restore_sampler(None) is False
    (tmp_path / "checkpoint-3" / "problem_sampler.json").write_text(
        __import__("json").dumps({**trainer.problem_sampler.state_dict(), "batches_drawn": 5}))
    assert trainer.restore_sampler(str(tmp_path / "checkpoint-3")) is True
    assert trainer.problem_sampler.batches_drawn == 5
