"""Rollouts ahead of training (posttrain.generation.async_rollouts): the generator's behaviour log-probabilities
are the trainer's, truncated importance weights are computed from them, a partial rollout resumes
its exact prefix, every trained batch is within the staleness bound (a batch past it is regenerated,
never trained), and a killed async run resumes on the batches of an uninterrupted one."""
import pytest

from test_rl_resume import KillAfter, Killed, _tiny_model, digits_reward

pytestmark = pytest.mark.timeout(600)

PROMPTS = 12  # 6 batches of 2 prompts per pass: 7 steps start two passes


def _spec(tokenizer, **options):
    from transformers import GenerationConfig

    from posttrain.generation.async_rollouts import GeneratorSpec

    sample = options.pop("sample", True)
    config = GenerationConfig(do_sample=sample, temperature=0.7 if sample else 1.0, top_k=0, top_p=1.0,
                              pad_token_id=tokenizer.pad_token_id)
    return GeneratorSpec(generation_config=config, stop_ids={tokenizer.eos_token_id}, pad_token_id=tokenizer.pad_token_id,
                         max_completion_length=12, temperature=0.7 if sample else 1.0, **options)


def _prompts(tokenizer, n=4):
    return tokenizer(text=[f"{i}+{i}=" for i in range(n)], add_special_tokens=False)["input_ids"]


def _recomputed(model, prompt, completion, temperature):
    import torch

    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(completion)[:, None]).squeeze(1)


def test_recorded_logprobs_are_the_trainers_and_the_importance_weights_follow_from_them(tokenizer):
    import torch

    from posttrain.generation.async_rollouts import generate_batch, truncated_importance_weights

    model = _tiny_model(tokenizer).eval()
    spec = _spec(tokenizer)
    prompts = _prompts(tokenizer)
    rollout = generate_batch(model, spec, prompts, batch=0, version=lambda: 0)
    assert any(len(row) > 1 for row in rollout.completion_ids)
    behaviour = []
    for prompt, completion, logprobs in zip(prompts, rollout.completion_ids, rollout.logprobs, strict=True):
        assert len(logprobs) == len(completion)
        recomputed = _recomputed(model, prompt, completion, spec.temperature)
        torch.testing.assert_close(torch.tensor(logprobs), recomputed, atol=1e-4, rtol=0)
        behaviour.append(recomputed)

    # The policy moves on: the weights are pi_new / pi_behaviour token by token, truncated at the cap.
    moved = _tiny_model(tokenizer).eval()
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    width = max(len(c) for c in rollout.completion_ids)
    pad = lambda rows: torch.stack([torch.nn.functional.pad(r, (0, width - len(r))) for r in rows])  # noqa: E731
    mask = pad([torch.ones(len(c)) for c in rollout.completion_ids])
    proximal = pad([_recomputed(moved, p, c, spec.temperature) for p, c in zip(prompts, rollout.completion_ids)])
    old = pad([torch.tensor(lp) for lp in rollout.logprobs])
    ratio = torch.exp(proximal - old) * mask
    cap = float(ratio[mask.bool()].median())   # half the tokens are above it
    assert cap > 1.0 or ratio[mask.bool()].max() > 1.0
    weights, stats = truncated_importance_weights(proximal, old, mask, mode="token_truncate", cap=cap)
    expected = torch.where(mask.bool(), ratio.clamp(max=cap), torch.ones_like(ratio))
    torch.testing.assert_close(weights, expected, atol=1e-5, rtol=1e-5)
    assert stats["clipped"] == pytest.approx(float(((ratio > cap) & mask.bool()).sum() / mask.sum()))
    assert 0 < stats["clipped"] < 1 and stats["max"] == pytest.approx(float(ratio[mask.bool()].max()), rel=1e-5)
    masked, _ = truncated_importance_weights(proximal, old, mask, mode="token_mask", cap=cap)
    assert torch.equal(masked == 0, (ratio > cap) & mask.bool())
    same, same_stats = truncated_importance_weights(old, old, mask, mode="token_truncate", cap=2.0)
    assert torch.equal(same, torch.ones_like(same)) and same_stats["clipped"] == 0


def test_a_partial_rollout_resumes_its_exact_prefix(tokenizer):
    import torch

    from posttrain.generation.async_rollouts import generate_batch

    model = _tiny_model(tokenizer).eval()
    prompts = _prompts(tokenizer)
    whole = generate_batch(model, _spec(tokenizer, sample=False), prompts, batch=0, version=lambda: 0)
    pieces = generate_batch(model, _spec(tokenizer, sample=False, partial_rollout_tokens=3), prompts, batch=0,
                            version=lambda: 0)
    assert whole.pieces == 1 and pieces.pieces > 1 and pieces.resumed_rows > 0
    assert pieces.completion_ids == whole.completion_ids
    for a, b in zip(pieces.logprobs, whole.logprobs):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-4, rtol=0)

    # New weights between pieces: the first 3 tokens are the old policy's, kept as they were; the rest
    # are the new policy's continuation of exactly that prefix, and each token says who drew it.
    moved = _tiny_model(tokenizer).eval()
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    current = {"version": 0}
    switched = _tiny_model(tokenizer).eval()

    def newest_weights():
        switched.load_state_dict(moved.state_dict())
        current["version"] = 1

    mixed = generate_batch(switched, _spec(tokenizer, sample=False, partial_rollout_tokens=3), prompts, batch=0,
                           version=lambda: current["version"], newest_weights=newest_weights)
    continued = generate_batch(moved, _spec(tokenizer, sample=False), [p + w[:3] for p, w in zip(prompts, whole.completion_ids)],
                               batch=0, version=lambda: 1)
    for row, (m, w) in enumerate(zip(mixed.completion_ids, whole.completion_ids)):
        assert m[:3] == w[:3]
        assert mixed.versions[row][:3] == [0] * min(3, len(m))
        if len(w) > 3 and w[2] != tokenizer.eos_token_id:
            assert m[3:] == continued.completion_ids[row][:len(m) - 3]
            assert set(mixed.versions[row][3:]) == {1}
    assert mixed.oldest_version() == 0


def _train_async(tokenizer, work, *, max_steps=7, kill_after=0, **rollouts):
    """test_rl_resume's tiny RL run, with `rollouts: async`: (generations, trainer or None if killed)."""
    from datasets import Dataset

    from posttrain.config.trainers import GRPOTrainerConfig
    from posttrain.config.rl import ProblemSamplingConfig
    from posttrain.rl.sampling import ProblemStats
    from posttrain.rl.trainer import StageGRPOTrainer, off_policy_settings
    from posttrain.training.trainers import grpo_args, resume_point

    stats = ProblemStats([f"b{i % 2}" for i in range(PROMPTS)])
    generations = []
    digits = digits_reward(stats, generations)

    cfg = GRPOTrainerConfig(max_steps=max_steps, prompts_per_step=2, num_generations=2, max_completion_length=8,
                            save_steps=1, learning_rate=1e-2, mask_truncated_completions=False, threads=1, **rollouts)
    trainer = StageGRPOTrainer(model=_tiny_model(tokenizer), reward_funcs=[digits], processing_class=tokenizer,
                               args=grpo_args(cfg, work, 0, [1.0]),
                               train_dataset=Dataset.from_list([{"prompt": f"{i}+{i}=", "problem_index": i}
                                                                for i in range(PROMPTS)]),
                               sampling=ProblemSamplingConfig(strategy="prioritized"), difficulty=[1] * PROMPTS,
                               problem_stats=stats, monitor_kl=True, **off_policy_settings(cfg))
    checkpoint = resume_point(work)
    trainer.restore_sampler(checkpoint)
    if kill_after:
        trainer.add_callback(KillAfter(kill_after))
    try:
        trainer.train(resume_from_checkpoint=checkpoint)
    except Killed:
        trainer.async_rollouts.close()
        return generations, None
    return generations, trainer


def _logged(trainer, key):
    return [row[key] for row in trainer.state.log_history if key in row]


@pytest.mark.parametrize("max_staleness", [pytest.param(1, marks=pytest.mark.slow), 2])
def test_an_async_run_trains_ahead_within_its_staleness_bound(tokenizer, tmp_path, max_staleness):
    generations, trainer = _train_async(tokenizer, tmp_path, rollouts="async", max_staleness=max_staleness)
    staleness = _logged(trainer, "rollout/batch_staleness")
    assert len(staleness) == 7 and max(staleness) <= max_staleness
    assert max(staleness) == max_staleness, staleness  # generation did run ahead of training
    stats = trainer.async_rollouts.stats
    # generated on demand only where the sampler's pass (the dataloader's epoch) begins
    assert stats.batches == 7 and stats.stale_dropped == 0 and stats.misses == 2
    assert all(0 < r <= 2.0 + 1e-6 for r in _logged(trainer, "rollout/is_ratio/mean"))
    assert not trainer.async_rollouts.generator   # stopped at the end of training
    kl = _logged(trainer, "kl")   # the policy's drift from the start is measured on every batch, stale or not
    assert len(kl) == 7 and kl[0] == 0 and max(kl) > 0, kl
    # the trainer's own sampler chose the problems: the sync run's schedule (prioritized sampling reads
    # the success rates, which differ, so compare the first draw and that every step trained a batch)
    sync, _ = _train_async(tokenizer, tmp_path / "sync", rollouts="sync")
    assert [g[0] for g in generations] == [g[0] for g in sync] == list(range(7))
    assert generations[0][1] == sync[0][1]


def test_a_batch_past_the_staleness_bound_never_trains(tokenizer, tmp_path):
    """Weights reach the generator only every 3 steps while the bound is 1: batches drawn by a policy
    two versions back are thrown away and drawn again by the current policy."""
    _, trainer = _train_async(tokenizer, tmp_path, rollouts="async", max_staleness=1, weight_sync_steps=3)
    staleness = _logged(trainer, "rollout/batch_staleness")
    assert len(staleness) == 7 and max(staleness) <= 1, staleness
    assert trainer.async_rollouts.stats.stale_dropped > 0


@pytest.mark.slow   # three async runs (about a minute): make test-all and CI run it
def test_a_killed_async_run_resumes_on_the_batches_of_an_uninterrupted_one(tokenizer, tmp_path):
    import json

    straight, _ = _train_async(tokenizer, tmp_path / "straight", rollouts="async", max_staleness=1)
    first, killed = _train_async(tokenizer, tmp_path / "killed", kill_after=4, rollouts="async", max_staleness=1)
    assert killed is None
    saved = json.loads(next((tmp_path / "killed").glob("checkpoint-4/async_rollouts*.json")).read_text())
    assert saved["in_flight"] >= 1   # generated ahead of the checkpoint: discarded with the process
    resumed, trainer = _train_async(tokenizer, tmp_path / "killed", rollouts="async", max_staleness=1)
    # no batch repeated, none skipped: the steps generated for continue from the checkpoint, and the
    # first batch after it is the one the uninterrupted run drew there (the sampler replays it)
    assert [g[0] for g in first] == list(range(4 + 1)) or [g[0] for g in first] == list(range(4))
    assert [g[0] for g in resumed] == list(range(4, 7))
    assert resumed[0][1] == straight[4][1]
    assert trainer.async_rollouts.stats.in_flight_discarded == saved["in_flight"]


def test_async_rollouts_refuse_what_they_cannot_run():
    from pydantic import ValidationError

    from posttrain.config.trainers import GRPOTrainerConfig

    with pytest.raises(ValidationError, match="partial_rollout_tokens .* needs rollouts: async"):
        GRPOTrainerConfig(partial_rollout_tokens=16)
    with pytest.raises(ValidationError, match="rollouts async .* use_vllm"):
        GRPOTrainerConfig(rollouts="async", use_vllm=True, vllm_mode="server", vllm_server_host="127.0.0.1")


@pytest.mark.parametrize("importance_sampling", ["token_truncate", pytest.param("none", marks=pytest.mark.slow)])
def test_the_importance_weights_reach_the_loss(tokenizer, tmp_path, monkeypatch, importance_sampling):
    """Weights of 0 on every token leave no gradient when the correction is on, and change nothing off."""
    import torch

    import posttrain.rl.trainer

    computed = posttrain.rl.trainer.truncated_importance_weights

    def zero(*args, **kwargs):
        weights, stats = computed(*args, **kwargs)
        return torch.zeros_like(weights), stats

    monkeypatch.setattr(posttrain.rl.trainer, "truncated_importance_weights", zero)
    _, trainer = _train_async(tokenizer, tmp_path, max_steps=3, rollouts="async", importance_sampling=importance_sampling)
    grads = _logged(trainer, "grad_norm")
    assert len(grads) == 3
    if importance_sampling == "none":
        assert max(grads) > 0
    else:
        assert max(grads) == 0
