"""What our RL stages add on top of TRL's GRPOTrainer: problem sampling driven by each problem's
running success rate (curriculum, prioritized, DAPO-style dropping of uniform groups), the group
statistics that say whether a batch carries any signal, and sampler state that survives a resume.

The correctness reward writes outcomes into a `ProblemStats`; the sampler reads it when it draws
the next batch of problems. Both live in one process, so no queue is needed.
"""
from __future__ import annotations

import copy
import json
import math
import os
import warnings
from pathlib import Path

import torch
from torch.utils.data import Sampler
from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler

from posttrain.async_rollouts import AsyncRollouts, Lookahead, truncated_importance_weights
from posttrain.config import ProblemSamplingConfig
from posttrain.rewards import verify_row

SAMPLER_STATE = "problem_sampler.json"
ROLLOUT_BUFFER = "rollout_buffer.pt"
ASYNC_STATE = "async_rollouts.json"


def per_process(name: str) -> str:
    """A resume file's name in this process: one file per rank when several train together (each
    holds its own rollouts and statistics), the plain name in a single process."""
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return name
    stem, _, suffix = name.partition(".")
    return f"{stem}.rank{os.environ.get('RANK', '0')}.{suffix}"


class ProblemStats:
    """Running success rate s_i per problem (exponential moving average over its groups).

    A problem not yet visited takes the running rate of its bucket (e.g. level and operation), so
    a few hundred steps over thousands of problems still steer towards the kinds the policy fails."""

    def __init__(self, buckets: list[str], *, prior: float = 0.5, decay: float = 0.5):
        self.buckets = buckets
        self.own = [prior] * len(buckets)
        self.visits = [0] * len(buckets)
        self.bucket_rate = {b: prior for b in buckets}
        self.decay = decay
        self.groups_scored = 0
        self.last_batch: dict[str, float] = {}

    def record(self, indices: list[int], correct: list[float], num_generations: int,
               lengths: list[int], reasons: list[str]) -> None:
        """One scored generation batch: consecutive runs of `num_generations` rows are one group."""
        all_correct = all_wrong = mixed = 0
        for start in range(0, len(indices), num_generations):
            group = correct[start:start + num_generations]
            index = indices[start]
            rate = sum(group) / len(group)
            first = self.visits[index] == 0
            self.own[index] = rate if first else self.decay * self.own[index] + (1 - self.decay) * rate
            bucket = self.buckets[index]
            self.bucket_rate[bucket] = 0.9 * self.bucket_rate[bucket] + 0.1 * rate
            self.visits[index] += 1
            all_correct += rate == 1.0
            all_wrong += rate == 0.0
            mixed += 0.0 < rate < 1.0
            self.groups_scored += 1
        groups = max(1, all_correct + all_wrong + mixed)
        right = [n for n, c in zip(lengths, correct) if c]
        wrong = [n for n, c in zip(lengths, correct) if not c]
        batch = {"groups/all_correct": all_correct / groups, "groups/all_wrong": all_wrong / groups,
                 "groups/mixed": mixed / groups,
                 "length/correct": sum(right) / len(right) if right else float("nan"),
                 "length/wrong": sum(wrong) / len(wrong) if wrong else float("nan"),
                 "tokens_per_correct": sum(lengths) / len(right) if right else float("nan")}
        for reason in sorted(set(reasons)):
            batch[f"verifier/{reason}"] = reasons.count(reason) / len(reasons)
        self.last_batch = batch

    @property
    def success(self) -> list[float]:
        return [own if visits else self.bucket_rate[bucket]
                for own, visits, bucket in zip(self.own, self.visits, self.buckets)]

    def state_dict(self) -> dict:
        return {"own": self.own, "visits": self.visits, "bucket_rate": self.bucket_rate,
                "groups_scored": self.groups_scored}

    def load_state_dict(self, state: dict) -> None:
        if len(state["own"]) != len(self.own):
            raise ValueError(f"sampler state is for {len(state['own'])} problems, this stage has "
                             f"{len(self.own)}: the stage's problem set changed since the checkpoint")
        self.own, self.visits = list(state["own"]), list(state["visits"])
        self.bucket_rate = dict(state["bucket_rate"])
        self.groups_scored = state["groups_scored"]


class ProblemSampler(Sampler):
    """Yields the index stream GRPOTrainer expects (each prompt `num_generations` times, each
    generation batch `repeat_count` times), choosing prompts by the configured policy:

    - uniform: a shuffled pass over the problems (TRL's RepeatSampler order);
    - curriculum: only problems up to a difficulty that rises evenly with training progress;
    - prioritized: P(i) = (1 - floor) * (1 - s_i) / sum_j (1 - s_j) + floor / N, so problems the
      policy already solves are still revisited with probability at least floor / N;
    - drop_uniform_groups also skips problems whose last group was all-correct or all-wrong with
      probability 1 - floor (their group would carry zero advantage).

    The stream is counted in copies: one copy of a chunk (its prompts, each `num_generations`
    times) is one dataloader batch, i.e. one `training_step`. The dataloader draws ahead of training
    (accelerate prefetches the next batch, the Trainer fetches a whole accumulation step), so when a
    checkpoint is saved the sampler has already drawn chunks no step has trained on. `state_dict`
    given the copies consumed so far saves those chunks, and a restored sampler's next pass replays
    them before drawing anew, after placeholder copies for the part of the pass already trained
    (the Trainer's own data skip, `ignore_data_skip=False`, throws those away). So a resumed run
    trains on the chunks of an uninterrupted one, in order, each drawn from the same statistics.
    """

    def __init__(self, difficulty: list[int], stats: ProblemStats, cfg: ProblemSamplingConfig, *,
                 prompts_per_batch: int, num_generations: int, repeat_count: int, total_batches: int, seed: int):
        self.difficulty = difficulty
        self.stats = stats
        self.cfg = cfg
        self.prompts_per_batch = prompts_per_batch
        self.num_generations = num_generations
        self.repeat_count = repeat_count
        self.total_batches = max(1, total_batches)
        self.batches_drawn = 0
        self.generator = torch.Generator().manual_seed(seed)
        self._order: list[int] = []
        self._copies_started = 0  # copies handed to the dataloader since the start of training
        self._drawn: list[tuple[int, list[int]]] = []  # this pass's chunks with the number of their first copy
        self._resume: tuple[int, list[tuple[list[int], int]]] | None = None

    def __len__(self) -> int:
        return self._copies_per_pass() * self.prompts_per_batch * self.num_generations

    def _copies_per_pass(self) -> int:
        return len(self.difficulty) // self.prompts_per_batch * self.repeat_count

    def __iter__(self):
        per_pass, skipped, replay = self._copies_per_pass(), 0, []
        if self._resume is not None:
            consumed, replay = self._resume
            self._resume = None
            # Each pass is one Trainer epoch of `per_pass` batches, and the Trainer skips the ones of
            # the resumed epoch it has trained on: stand-ins, so that skipping them draws nothing.
            skipped = consumed % per_pass
            self._copies_started = consumed
            placeholder = [0] * (self.prompts_per_batch * self.num_generations)
            for _ in range(skipped):
                yield from placeholder
        self._drawn = []
        handed = skipped
        for chunk, copies in replay:
            yield from self._copies(chunk, copies)
            handed += copies
        while handed < per_pass:
            yield from self._copies(self.next_batch(), self.repeat_count)
            handed += self.repeat_count

    def _copies(self, chunk: list[int], copies: int):
        """The last `copies` of the chunk's `repeat_count` copies, recorded as drawn."""
        self._drawn.append((self._copies_started - (self.repeat_count - copies), chunk))
        for _ in range(copies):
            self._copies_started += 1
            for index in chunk:
                yield from [index] * self.num_generations

    def eligible(self) -> list[int]:
        if not self.cfg.curriculum:
            return list(range(len(self.difficulty)))
        levels = sorted(set(self.difficulty))
        progress = min(1.0, self.batches_drawn / (self.total_batches * self.cfg.curriculum_fraction))
        top = levels[min(len(levels) - 1, int(progress * len(levels)))]
        return [i for i, d in enumerate(self.difficulty) if d <= top]

    def weights(self, candidates: list[int]) -> torch.Tensor:
        n = len(candidates)
        success = self.stats.success
        if self.cfg.strategy == "prioritized":
            need = torch.tensor([1.0 - success[i] for i in candidates], dtype=torch.float64)
            need = need / need.sum() if need.sum() > 0 else torch.full((n,), 1.0 / n, dtype=torch.float64)
            weights = (1 - self.cfg.floor) * need + self.cfg.floor / n
        else:
            weights = torch.full((n,), 1.0 / n, dtype=torch.float64)
        if self.cfg.drop_uniform_groups:
            uniform = torch.tensor([self.stats.visits[i] > 0 and success[i] in (0.0, 1.0) for i in candidates])
            weights = torch.where(uniform, weights * self.cfg.floor, weights)
        return weights

    def next_batch(self) -> list[int]:
        candidates = self.eligible()
        if self.cfg.strategy == "uniform" and not self.cfg.drop_uniform_groups:
            chunk = self._uniform_batch(candidates)
        else:
            picks = torch.multinomial(self.weights(candidates), min(self.prompts_per_batch, len(candidates)),
                                      replacement=False, generator=self.generator)
            chunk = [candidates[i] for i in picks.tolist()]
        self.batches_drawn += 1
        return chunk

    def _uniform_batch(self, candidates: list[int]) -> list[int]:
        allowed = set(candidates)
        self._order = [i for i in self._order if i in allowed]
        if len(self._order) < self.prompts_per_batch:
            perm = torch.randperm(len(candidates), generator=self.generator).tolist()
            self._order += [candidates[i] for i in perm]
        chunk, self._order = self._order[:self.prompts_per_batch], self._order[self.prompts_per_batch:]
        return chunk

    def state_dict(self, copies_consumed: int | None = None) -> dict:
        """The draw state (after every draw so far); given the copies training has consumed, also
        the chunks drawn ahead of it (`pending`: each with its copies still to train on), which a
        restored sampler replays first."""
        state = {"batches_drawn": self.batches_drawn, "generator": self.generator.get_state().tolist(),
                 "order": self._order, "stats": self.stats.state_dict()}
        if copies_consumed is not None:
            state["copies_consumed"] = copies_consumed
            state["pending"] = [[chunk, min(self.repeat_count, first + self.repeat_count - copies_consumed)]
                                for first, chunk in self._drawn if first + self.repeat_count > copies_consumed]
        return state

    def load_state_dict(self, state: dict) -> None:
        self.batches_drawn = state["batches_drawn"]
        self.generator.set_state(torch.tensor(state["generator"], dtype=torch.uint8))
        self._order = list(state["order"])
        self.stats.load_state_dict(state["stats"])
        if "copies_consumed" in state:
            self._resume = (state["copies_consumed"], [(list(chunk), copies) for chunk, copies in state["pending"]])


class CloseRollouts(TrainerCallback):
    """Stops the async generator process when training ends."""

    def __init__(self, rollouts: AsyncRollouts):
        self.rollouts = rollouts

    def on_train_end(self, args, state, control, **kwargs):
        self.rollouts.close()


def async_rollouts_for(trainer_cfg) -> AsyncRollouts | None:
    """The `rollout_func` of `rollouts: async`, or None (sync: the stage's own decoding)."""
    if trainer_cfg.rollouts != "async":
        return None
    return AsyncRollouts(max_staleness=trainer_cfg.max_staleness, partial_rollout_tokens=trainer_cfg.partial_rollout_tokens,
                         threads=trainer_cfg.rollout_threads, weight_sync_steps=trainer_cfg.weight_sync_steps)


def off_policy_settings(trainer_cfg) -> dict:
    """StageGRPOTrainer's keyword arguments for the trainer config's rollouts."""
    return {"rollouts": async_rollouts_for(trainer_cfg), "importance_sampling": trainer_cfg.importance_sampling,
            "importance_sampling_cap": trainer_cfg.importance_sampling_cap}


class ResumeCheckpoint(TrainerCallback):
    """Writes what TRL's checkpoint lacks for an exact resume (the trainer's `save_resume_state`)
    into each trainer checkpoint."""

    def __init__(self, save_resume_state):
        self.save_resume_state = save_resume_state

    def on_save(self, args, state, control, **kwargs):
        # Each optimizer step trains on `gradient_accumulation_steps` dataloader batches, and the
        # Trainer's data skip on resume counts them the same way.
        self.save_resume_state(Path(args.output_dir) / f"checkpoint-{state.global_step}",
                               state.global_step * args.gradient_accumulation_steps)


class EpochOrderedRepeatSampler(RepeatSampler):
    """TRL's RepeatSampler with the shuffle of epoch e fixed by e alone. The plain one draws each
    epoch's order from where the previous epoch left its generator, so a run resumed in a later
    epoch (the Trainer starts there and skips the trained batches of that epoch) would replay the
    first epoch's order."""

    def set_epoch(self, epoch: int) -> None:
        if self.shuffle and self.seed is not None:
            self.generator.manual_seed(self.seed)
            for _ in range(epoch):
                torch.randperm(self.num_samples, generator=self.generator)


def decode_rollouts(prompts: list[str], trainer) -> dict:
    """TRL's `rollout_func` on the plain transformers path: the rollouts of posttrain.generation.decode,
    where a row that has ended leaves the batch and its KV cache (`generate` carries every row to the
    longest one) and the cache is allocated once. The tokens are drawn as `generate` draws them (TRL's
    generation config and its logits processors, the global RNG, one draw for the whole batch per
    token), so they are the rollouts TRL's own path would sample, token for token
    (tests/test_rl_rollouts.py): 64 rollouts of up to 144 tokens in 1.5 s instead of 2.3 s on 2 CPU
    cores (bench/results/time_bound.md). Prompts arrive rendered with the chat template
    (posttrain.trainers.grpo_dataset), which holds any BOS already: no special tokens are added."""
    from trl.models import unwrap_model_for_generation
    from trl.trainer.utils import pad

    from posttrain.generation import TokenPicker, decode

    prompt_ids = trainer.processing_class(text=prompts, add_special_tokens=False)["input_ids"]
    device = trainer.accelerator.device
    rows = [torch.tensor(ids) for ids in prompt_ids]
    ids = pad(rows, padding_value=trainer.processing_class.pad_token_id, padding_side="left").to(device)
    mask = pad([torch.ones_like(t) for t in rows], padding_value=0, padding_side="left").to(device)
    with (unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator, generation_kwargs=trainer.generation_kwargs,
                                      gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs) as model,
          torch.no_grad()):
        pick = TokenPicker(model, ids, None, generation_config=trainer.generation_config, whole_batch=True)
        completions = decode(model, ids, mask, max_new_tokens=trainer.max_completion_length,
                             stop_ids=set(trainer.eos_token_ids), pick=pick)
    return {"prompt_ids": prompt_ids, "completion_ids": completions, "logprobs": None}


class StageGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer as the RL stages run it, extended through TRL's public points:
    rollouts by `rollout_func` (`decode_rollouts`, where TRL would generate with plain transformers),
    rewards as plain callables that also log the group, sampler and per-kind statistics through TRL's
    `log_metric` (posttrain.rl_rewards), and callbacks for the resume files, alerts and the held-out
    probe. What our stages add that no public point reaches is overridden here, once, and pinned
    against TRL by tests/test_rl_resume.py and tests/test_rl_rollouts.py:
      - `_get_train_sampler`: the problem sampler (prioritized / curriculum, `sampling`) or TRL's
        RepeatSampler made resumable in any epoch;
      - `train`: a resume counts TRL's generation schedule on from the checkpoint's step and reuses
        the saved rollouts between two generations (TRL's checkpoint holds neither);
      - `_generate_and_score_completions`: the rollout policy's KL to the starting policy (`monitor_kl`
        at beta = 0), the policy step that generated the batch, and DAPO's uniform groups taken out
        of the loss read or change the scored batch, which no callback sees;
      - `_tokenize_prompts`, on TRL's own generation path only: rendered prompts get no second BOS.
    Together with the Trainer's own checkpoint (weights, optimizer, scheduler, RNG) a resumed run
    trains as the uninterrupted one."""

    def __init__(self, *args, sampling: ProblemSamplingConfig | None = None, difficulty: list[int] | None = None,
                 problem_stats: ProblemStats | None = None, monitor_kl: bool = False,
                 rollouts: AsyncRollouts | None = None, importance_sampling: str = "none",
                 importance_sampling_cap: float = 2.0, **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="You are using 'rollout_func'")
            warnings.filterwarnings("ignore", message="You are using 'environment_factory'")
            super().__init__(*args, rollout_func=rollouts or decode_rollouts, **kwargs)
        self.async_rollouts, self.importance_sampling = rollouts, importance_sampling
        self.importance_sampling_cap = importance_sampling_cap
        if rollouts is not None:
            refused = self._async_refused()
            if refused:
                raise ValueError(f"rollouts: async: {refused}; use rollouts: sync")
            self.add_callback(CloseRollouts(rollouts))
        elif not self._plain_generation():
            self.rollout_func = None   # vLLM, ZeRO-3/FSDP or a history-reading processor: TRL generates
        self.add_callback(ResumeCheckpoint(self.save_resume_state))
        # Copied before any step, and before a resume loads its checkpoint: the starting policy.
        self.drift_anchor = None
        if monitor_kl and self.beta == 0.0:
            self.drift_anchor = copy.deepcopy(self.accelerator.unwrap_model(self.model)).eval().requires_grad_(False)
        self.sampling, self.problem_stats, self.problem_sampler = sampling, problem_stats, None
        if sampling is not None:
            total_batches = math.ceil(self.args.max_steps / self.args.steps_per_generation)
            self.problem_sampler = ProblemSampler(
                difficulty, problem_stats, sampling, prompts_per_batch=self.args.generation_batch_size // self.num_generations,
                num_generations=self.num_generations, repeat_count=self._generate_every(),
                total_batches=total_batches, seed=self.args.seed)

    def _plain_generation(self) -> bool:
        from posttrain.generation import TokenPicker

        if (self.use_vllm or self.use_transformers_continuous_batching or self.tools or self.is_deepspeed_enabled
                or self.is_fsdp_enabled):
            return False
        model = self.accelerator.unwrap_model(self.model)
        probe = torch.zeros((1, 1), dtype=torch.long, device=self.accelerator.device)
        # a processor that reads each row's tokens so far (e.g. a repetition penalty) cannot follow rows out of the batch
        return not TokenPicker(model, probe, None, generation_config=self.generation_config, whole_batch=True).stateful

    def _async_refused(self) -> str | None:
        if self.tools:
            return "tool episodes run in TRL's multi-turn tool loop, which generates in step with training"
        if self.accelerator.num_processes > 1:
            return (f"{self.accelerator.num_processes} processes: the generator sees one process's sampler; "
                    "run the stage in one process")
        if not self._plain_generation():
            return "the model is sharded or a logits processor reads each row's history"
        return None

    def _get_train_sampler(self, dataset=None) -> Sampler:
        sampler = self._stage_sampler(dataset)
        if self.async_rollouts is not None:
            sampler = self.async_rollouts.lookahead = Lookahead(sampler, self.args.generation_batch_size)
        return sampler

    def _stage_sampler(self, dataset=None) -> Sampler:
        if self.problem_sampler is not None:
            return self.problem_sampler
        # TRL's sampler, in the same order, but resumable in any epoch (accelerate's dataloader calls
        # set_epoch on it at every epoch, also after skipping the trained batches).
        return EpochOrderedRepeatSampler(
            data_source=self.train_dataset if dataset is None else dataset, mini_repeat_count=self.num_generations,
            batch_size=self.args.generation_batch_size // self.num_generations,
            repeat_count=self._generate_every(), shuffle=self.shuffle_dataset, seed=self.args.seed)

    def _generate_every(self) -> int:
        return self.args.steps_per_generation * self.num_iterations

    def _tokenize_prompts(self, prompts: list):
        if prompts and isinstance(prompts[0], str):
            return self.processing_class(text=prompts, add_special_tokens=False)["input_ids"], None, {}
        return super()._tokenize_prompts(prompts)

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._metrics["train"]["rollout/staleness"].append(float(self.state.global_step - self._rollout_step))
        return loss

    # The optimizer step whose policy generated the rollouts in use.
    _rollout_step = 0

    def _generate_and_score_completions(self, inputs):
        # pi_old for this batch is the policy as of this optimizer step; with num_iterations > 1 the
        # batch is reused for later steps, and `rollout/staleness` says how far behind it then is.
        self._rollout_step = self.state.global_step
        out = super()._generate_and_score_completions(inputs)
        metrics = self._metrics["train" if self.model.training else "eval"]
        metrics["rollout/policy_step"].append(float(self._rollout_step))
        if self.drift_anchor is not None:
            kl = self.rollout_kl_to_anchor(out)
            if kl is not None:
                metrics["kl"].append(kl)
        if self.problem_stats is not None:
            for bucket, rate in sorted(self.problem_stats.bucket_rate.items()):
                metrics[f"sampler/success/{bucket}"].append(rate)
        if self.sampling is not None and self.sampling.drop_uniform_groups:
            advantages = out["advantages"].view(-1, self.num_generations)
            uniform = (advantages == 0).all(dim=1).repeat_interleave(self.num_generations)
            out["completion_mask"] = out["completion_mask"] * (~uniform).unsqueeze(1).to(out["completion_mask"].dtype)
            metrics["groups/dropped"].append(uniform.float().mean().item())
        if self.async_rollouts is not None and self.model.training:
            self._off_policy_batch(out, metrics)
        return out

    def _off_policy_batch(self, out: dict, metrics) -> None:
        """Tag the batch with the oldest policy version that drew it, log how far generation ran
        ahead, and weight each token's advantage by pi_current / pi_behaviour (truncated or masked at
        the cap). Folding the weight into a per-token advantage is exactly TRL's own correction
        (`per_token_loss * importance_sampling_ratio`, which TRL applies only on its vLLM path):
        min(r * w * A, clip(r) * w * A) = w * min(r * A, clip(r) * A) for w >= 0, and the KL term is
        added after it in both."""
        last = self.async_rollouts.last
        self._rollout_step = last["oldest"]
        metrics["rollout/policy_step"][-1] = float(last["oldest"])
        metrics["rollout/batch_staleness"].append(float(last["version"] - last["oldest"]))
        metrics["rollout/version_spread"].append(float(last["version_spread"]))
        metrics["rollout/wait_s"].append(last["wait_s"])
        metrics["rollout/generate_s"].append(last["generate_s"])
        metrics["rollout/hidden"].append(max(0.0, 1.0 - last["wait_s"] / last["generate_s"]) if last["generate_s"] else 0.0)
        metrics["rollout/resumed_rows"].append(float(last["resumed_rows"]))
        stats = self.async_rollouts.stats
        metrics["rollout/stale_dropped"].append(float(stats.stale_dropped))
        metrics["rollout/misses"].append(float(stats.misses))
        behaviour = out.get("sampling_per_token_logps")
        if behaviour is None:
            return
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        with torch.no_grad():
            proximal, _, _ = self._get_per_token_logps_and_entropies(
                self.model, ids, mask, out["completion_ids"].size(1), batch_size=self.args.per_device_train_batch_size)
        weights, ratio = truncated_importance_weights(proximal, behaviour, out["completion_mask"].float(),
                                                      mode=self.importance_sampling if self.importance_sampling != "none"
                                                      else "token_truncate", cap=self.importance_sampling_cap)
        for name, value in ratio.items():
            metrics[f"rollout/is_ratio/{name}"].append(value)
        if self.importance_sampling != "none":
            out["advantages"] = out["advantages"].unsqueeze(1) * weights

    @torch.no_grad()
    def rollout_kl_to_anchor(self, batch: dict) -> float | None:
        """KL(rollout policy || starting policy) over the completion tokens TRL's completion mask
        keeps (with mask_truncated_completions, truncated completions are out), with the k3
        estimator of TRL's KL term, in float64 (the per-token differences are tiny), summed over
        processes. On one completion per group: two forward passes over the whole batch cost a
        third of a CPU step (bench/rl_step.py). None when no token is left to measure."""
        one_per_group = slice(None, None, self.num_generations)
        completion_ids, completion_mask = batch["completion_ids"][one_per_group], batch["completion_mask"][one_per_group]
        ids = torch.cat([batch["prompt_ids"][one_per_group], completion_ids], dim=1)
        mask = torch.cat([batch["prompt_mask"][one_per_group], completion_mask], dim=1)
        keep, chunk = completion_ids.size(1), self.args.per_device_train_batch_size
        # Both on the same slice and the same way, so the first batch reads exactly 0.
        policy, _, _ = self._get_per_token_logps_and_entropies(self.model, ids, mask, keep, batch_size=chunk)
        anchor, _, _ = self._get_per_token_logps_and_entropies(self.drift_anchor, ids, mask, keep, batch_size=chunk)
        delta = anchor.double() - policy.double()
        weights = completion_mask.double()
        local = torch.stack([((torch.exp(delta) - delta - 1) * weights).sum(), weights.sum()])
        total, count = self.accelerator.reduce(local, reduction="sum").tolist()
        return total / count if count else None

    def save_resume_state(self, checkpoint_dir: Path, batches_consumed: int) -> None:
        def replace(name: str, write) -> None:   # written whole or not at all: a kill mid-write leaves the old file
            target = checkpoint_dir / per_process(name)
            write(target.with_suffix(".tmp"))
            target.with_suffix(".tmp").replace(target)

        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        if self.async_rollouts is not None:
            state = json.dumps({"in_flight": self.async_rollouts.in_flight(), "batches": self.async_rollouts.stats.batches,
                                "stale_dropped": self.async_rollouts.stats.stale_dropped})
            replace(ASYNC_STATE, lambda tmp: tmp.write_text(state))
        if batches_consumed % self._generate_every() and self._buffered_inputs is not None:
            replace(ROLLOUT_BUFFER, lambda tmp: torch.save({"inputs": self._buffered_inputs,
                                                            "rollout_step": self._rollout_step}, tmp))
        if self.problem_sampler is not None:
            state = json.dumps(self.problem_sampler.state_dict(batches_consumed))
            replace(SAMPLER_STATE, lambda tmp: tmp.write_text(state))

    def restore_sampler(self, checkpoint_dir: str | None) -> bool:
        """Call before `train(resume_from_checkpoint=checkpoint_dir)`."""
        if checkpoint_dir is None or self.problem_sampler is None:
            return False
        path = Path(checkpoint_dir) / per_process(SAMPLER_STATE)
        if not path.is_file():
            # HF writes the checkpoint before on_save callbacks run, so a kill in between leaves a
            # usable checkpoint without sampler state: resume the weights, restart the schedule.
            warnings.warn(f"{path} is missing: resuming the weights and optimizer from {checkpoint_dir} "
                          f"with a fresh problem sampler (its success statistics start over)")
            return False
        self.problem_sampler.load_state_dict(json.loads(path.read_text()))
        return True

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        if resume_from_checkpoint is True:
            resume_from_checkpoint = get_last_checkpoint(self.args.output_dir)
        if resume_from_checkpoint:
            self._continue_generation_schedule(Path(resume_from_checkpoint))
            saved = Path(resume_from_checkpoint) / per_process(ASYNC_STATE)
            if self.async_rollouts is not None and saved.is_file():
                # what the generator held past the checkpoint is gone with its process: the sampler
                # replays those batches (ProblemSampler's pending chunks, TRL's order), generated anew
                self.async_rollouts.stats.in_flight_discarded = json.loads(saved.read_text())["in_flight"]
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _continue_generation_schedule(self, checkpoint_dir: Path) -> None:
        state = checkpoint_dir / "trainer_state.json"
        if not state.is_file():
            return  # the Trainer says what is wrong with the checkpoint
        # TRL counts training steps from 0 in every process and generates when the count is a
        # multiple of steps_per_generation * num_iterations: it must count on from the checkpoint.
        self._step = json.loads(state.read_text())["global_step"] * self.args.gradient_accumulation_steps
        if self._step % self._generate_every() == 0:
            return
        rollouts = checkpoint_dir / per_process(ROLLOUT_BUFFER)
        if not rollouts.is_file():
            warnings.warn(f"{rollouts} is missing: the steps up to the next generation train on new rollouts "
                          f"of the same prompts instead of the saved ones")
            return
        saved = torch.load(rollouts, map_location=self.accelerator.device, weights_only=True)
        self._buffered_inputs, self._rollout_step = saved["inputs"], saved["rollout_step"]


def policy_record(trainer_cfg, parent, resumed_from: str | None, trainer=None) -> dict[str, str]:
    """Which policy generated the rollouts (pi_old) and which one anchors the KL term (pi_ref)."""
    on_policy = trainer_cfg.num_iterations == 1
    rollout_policy = ("current policy at each step (on-policy)" if on_policy else
                      f"policy at the step of generation, reused for {trainer_cfg.num_iterations} updates "
                      f"(see rollout/staleness in the log)")
    if trainer_cfg.rollouts == "async":
        rollout_policy = (f"a generator process up to {trainer_cfg.max_staleness} policy versions behind "
                          f"(rollout/batch_staleness), importance sampling {trainer_cfg.importance_sampling} at cap "
                          f"{trainer_cfg.importance_sampling_cap}" + (f", partial rollouts of {trainer_cfg.partial_rollout_tokens} "
                                                                      f"tokens per version" if trainer_cfg.partial_rollout_tokens else ""))
    record = {
        "rollout_policy": rollout_policy,
        "reference_policy": f"{parent.path} (digest {parent.digest[:12]}), frozen for the stage"
        if trainer_cfg.beta > 0 else "none: beta = 0, no KL term" + (
            f"; `kl` in the log is the rollout policy's drift from {parent.path} (digest {parent.digest[:12]})"
            if trainer_cfg.monitor_kl else ""),
        "resumed_from": resumed_from or "",
    }
    rollouts = getattr(trainer, "async_rollouts", None)
    if rollouts is not None:
        stats = rollouts.stats
        record["async_rollouts"] = (f"{stats.batches} batches, {stats.misses} generated on demand, {stats.stale_dropped} "
                                    f"past max_staleness regenerated, {stats.in_flight_discarded} in flight at the "
                                    f"checkpoint resumed from discarded; trainer waited {stats.wait_s:.1f} s of the "
                                    f"generator's {stats.generate_s:.1f} s")
    return record


class HeldOutProbe(TrainerCallback):
    """Greedy pass@1 on a fixed slice of a held-out math suite every `every` steps, written into
    the trainer's log history (and so into its checkpoints and the report's RL plot). Monitoring
    only: nothing is selected on it, so the gate's evaluation stays unbiased."""

    def __init__(self, tokenizer, chat, problems: list[dict], *, every: int, max_new_tokens: int):
        self.tokenizer, self.chat = tokenizer, chat
        self.problems = problems
        self.requests = [(p["prompt"], p.get("thinking", True)) for p in problems]
        self.every = every
        self.max_new_tokens = max_new_tokens

    def score(self, model) -> float:
        from posttrain.generation import generate_replies

        outputs = generate_replies(model, self.tokenizer, self.chat, self.requests, max_new_tokens=self.max_new_tokens,
                                   desc="held-out probe")
        return sum(verify_row(o[0].text, p, truncated=o[0].truncated)[0]
                   for o, p in zip(outputs, self.problems)) / len(self.problems)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if state.global_step == 0 and self.requests:
            state.log_history.append({"step": 0, "heldout/math_accuracy": self.score(model)})

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.requests and (state.global_step % self.every == 0 or state.global_step == state.max_steps):
            state.log_history.append({"step": state.global_step, "heldout/math_accuracy": self.score(model)})
