"""TRL's GRPOTrainer as the RL stages run it (`StageGRPOTrainer`), extended through TRL's public
points: rollouts by `rollout_func`, rewards as callables, callbacks for resume files, alerts and
the held-out probe, and the record of the policies a stage trained."""
from __future__ import annotations

import copy
import json
import math
import warnings
from pathlib import Path

import torch
from torch.utils.data import Sampler
from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint
from trl import GRPOTrainer

from posttrain.config.rl import ProblemSamplingConfig
from posttrain.generation.async_rollouts import (
    AsyncRollouts,
    Lookahead,
    truncated_importance_weights,
)
from posttrain.rewards import verify_row
from posttrain.rl.sampling import (
    SAMPLER_STATE,
    EpochOrderedRepeatSampler,
    ProblemSampler,
    ProblemStats,
    per_process,
)

ROLLOUT_BUFFER = "rollout_buffer.pt"
ASYNC_STATE = "async_rollouts.json"


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


def decode_rollouts(prompts: list[str], trainer) -> dict:
    """TRL's `rollout_func` on the plain transformers path: the rollouts of posttrain.generation.engines.decode,
    where a row that has ended leaves the batch and its KV cache (`generate` carries every row to the
    longest one) and the cache is allocated once. The tokens are drawn as `generate` draws them (TRL's
    generation config and its logits processors, the global RNG, one draw for the whole batch per
    token), so they are the rollouts TRL's own path would sample, token for token
    (tests/test_rl_rollouts.py): 64 rollouts of up to 144 tokens in 1.5 s instead of 2.3 s on 2 CPU
    cores (bench/results/time_bound.md). Prompts arrive rendered with the chat template
    (posttrain.training.trainers.grpo_dataset, posttrain.chat.as_trl_prompt) and are tokenized as TRL's
    own path tokenizes them, with the tokenizer's special tokens."""
    from trl.models import unwrap_model_for_generation
    from trl.trainer.utils import pad

    from posttrain.generation.engines import TokenPicker, decode

    prompt_ids = trainer.processing_class(text=prompts)["input_ids"]
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
    """TRL's GRPOTrainer as the RL stages run it, extended only through public points (no method of
    TRL's or transformers' whose name starts with `_` is overridden: tests/test_architecture.py):
      - `rollout_func`: rollouts by posttrain's decode loop (`decode_rollouts`, where TRL would
        generate with plain transformers) or generated ahead of training (posttrain.generation.async_rollouts);
      - reward callables that also log the group, sampler and per-kind statistics through TRL's
        `log_metric` (posttrain.rl.rewards);
      - `get_train_dataloader`: the problem sampler (prioritized / curriculum, `sampling`) or TRL's
        RepeatSampler made resumable in any epoch;
      - `compute_loss`: DAPO's rows without signal out of the loss, the off-policy correction, and the
        rollout policy's step, staleness and KL to the starting policy (`monitor_kl` at beta = 0);
      - `train`: a resume counts TRL's generation schedule on from the checkpoint's step and reuses
        the saved rollouts between two generations (TRL's checkpoint holds neither; this sets TRL's
        `_step` and `_buffered_inputs`, docs/architecture.md says which upstream change removes it);
      - callbacks for the resume files, alerts and the held-out probe.
    Together with the Trainer's own checkpoint (weights, optimizer, scheduler, RNG) a resumed run
    trains as the uninterrupted one (tests/test_rl_resume.py)."""

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
        self.logged_rollout_batch = -1
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
                num_generations=self.num_generations, repeat_count=self.generate_every(),
                total_batches=total_batches, seed=self.args.seed)

    def _plain_generation(self) -> bool:
        from posttrain.generation.engines import TokenPicker

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

    def get_train_dataloader(self):
        """Trainer.get_train_dataloader, the documented point to choose how training batches are drawn,
        as GRPOTrainer builds it (one generation batch, per-device batch x steps_per_generation, per
        load), with the stage's sampler, seen ahead by the async generator when there is one."""
        from torch.utils.data import DataLoader

        sampler = self.stage_sampler()
        if self.async_rollouts is not None:
            sampler = self.async_rollouts.lookahead = Lookahead(sampler, self.args.generation_batch_size)
        loader = DataLoader(self.train_dataset, batch_size=self.args.per_device_train_batch_size * self.args.steps_per_generation,
                            sampler=sampler, collate_fn=self.data_collator, drop_last=self.args.dataloader_drop_last,
                            num_workers=self.args.dataloader_num_workers, pin_memory=self.args.dataloader_pin_memory,
                            persistent_workers=self.args.dataloader_persistent_workers)
        return self.accelerator.prepare(loader)

    def stage_sampler(self) -> Sampler:
        if self.problem_sampler is not None:
            return self.problem_sampler
        # TRL's sampler, in the same order, but resumable in any epoch (accelerate's dataloader calls
        # set_epoch on it at every epoch, also after skipping the trained batches).
        return EpochOrderedRepeatSampler(
            data_source=self.train_dataset, mini_repeat_count=self.num_generations,
            batch_size=self.args.generation_batch_size // self.num_generations,
            repeat_count=self.generate_every(), shuffle=self.shuffle_dataset, seed=self.args.seed)

    def generate_every(self) -> int:
        """Micro-steps between two generations: TRL generates when its micro-step count is a multiple."""
        return self.args.steps_per_generation * self.num_iterations

    def generation_step(self) -> int:
        """The optimizer step at which the batch in use was generated (or received from the async
        generator): the last multiple of the generation period at or before this step, TRL's
        schedule, counted on after a resume."""
        accumulation, every = self.args.gradient_accumulation_steps, self.generate_every()
        return (self.state.global_step * accumulation) // every * every // accumulation

    def rollout_policy_step(self) -> int:
        """The optimizer step whose policy drew the rollouts in use: the generation step, or for
        async rollouts the oldest policy version that drew the batch."""
        if self.async_rollouts is not None and self.async_rollouts.last is not None:
            return self.async_rollouts.last["oldest"]
        return self.generation_step()

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """GRPO's loss on one micro-batch of the scored batch, after what the stages add to that batch:
        DAPO's rows without signal taken out of the loss, the off-policy correction of async rollouts,
        and the logs of the rollout policy (its step and staleness, its KL to the starting policy, the
        sampler's success rates). TRL's documented point to change the loss (Trainer.compute_loss)."""
        if self.model.training:
            inputs = dict(inputs)
            metrics = self._metrics["train"]
            policy_step = self.rollout_policy_step()
            metrics["rollout/policy_step"].append(float(policy_step))
            metrics["rollout/staleness"].append(float(self.state.global_step - policy_step))
            if self.drift_anchor is not None and self.generation_step() == self.state.global_step:
                kl = self.rollout_kl_to_anchor(inputs)
                if kl is not None:
                    metrics["kl"].append(kl)
            if self.problem_stats is not None:
                for bucket, rate in sorted(self.problem_stats.bucket_rate.items()):
                    metrics[f"sampler/success/{bucket}"].append(rate)
            if self.sampling is not None and self.sampling.drop_uniform_groups:
                # a row of a group whose rewards are all equal has advantage 0: no signal, out of the loss
                silent = inputs["advantages"] == 0
                inputs["completion_mask"] = inputs["completion_mask"] * (~silent).unsqueeze(1).to(inputs["completion_mask"].dtype)
                metrics["groups/dropped"].append(silent.float().mean().item())
            if self.async_rollouts is not None:
                self.off_policy_batch(inputs, metrics)
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    def off_policy_batch(self, batch: dict, metrics) -> None:
        """Log how far generation ran ahead (once per generated batch), and weight each token's
        advantage by pi_current / pi_behaviour (truncated or masked at the cap). Folding the weight
        into a per-token advantage is exactly TRL's own correction (`per_token_loss *
        importance_sampling_ratio`, which TRL applies only on its vLLM path): min(r * w * A, clip(r) *
        w * A) = w * min(r * A, clip(r) * A) for w >= 0, and the KL term is added after it in both."""
        stats, last = self.async_rollouts.stats, self.async_rollouts.last
        if stats.batches != self.logged_rollout_batch:
            self.logged_rollout_batch = stats.batches
            metrics["rollout/batch_staleness"].append(float(last["version"] - last["oldest"]))
            metrics["rollout/version_spread"].append(float(last["version_spread"]))
            metrics["rollout/wait_s"].append(last["wait_s"])
            metrics["rollout/generate_s"].append(last["generate_s"])
            metrics["rollout/hidden"].append(max(0.0, 1.0 - last["wait_s"] / last["generate_s"]) if last["generate_s"] else 0.0)
            metrics["rollout/resumed_rows"].append(float(last["resumed_rows"]))
            metrics["rollout/stale_dropped"].append(float(stats.stale_dropped))
            metrics["rollout/misses"].append(float(stats.misses))
        behaviour = batch.get("sampling_per_token_logps")
        if behaviour is None:
            return
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        with torch.no_grad():
            current, _, _ = self._get_per_token_logps_and_entropies(
                self.model, ids, mask, batch["completion_ids"].size(1), batch_size=self.args.per_device_train_batch_size)
        weights, ratio = truncated_importance_weights(current, behaviour, batch["completion_mask"].float(),
                                                      mode=self.importance_sampling if self.importance_sampling != "none"
                                                      else "token_truncate", cap=self.importance_sampling_cap)
        for name, value in ratio.items():
            metrics[f"rollout/is_ratio/{name}"].append(value)
        if self.importance_sampling != "none":
            batch["advantages"] = batch["advantages"].unsqueeze(1) * weights

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
        if batches_consumed % self.generate_every() and self._buffered_inputs is not None:
            replace(ROLLOUT_BUFFER, lambda tmp: torch.save({"inputs": self._buffered_inputs}, tmp))
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
        if self._step % self.generate_every() == 0:
            return
        rollouts = checkpoint_dir / per_process(ROLLOUT_BUFFER)
        if not rollouts.is_file():
            warnings.warn(f"{rollouts} is missing: the steps up to the next generation train on new rollouts "
                          f"of the same prompts instead of the saved ones")
            return
        saved = torch.load(rollouts, map_location=self.accelerator.device, weights_only=True)
        self._buffered_inputs = saved["inputs"]


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
        from posttrain.generation.engines import generate_replies

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
