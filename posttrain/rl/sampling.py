"""Problem sampling for the RL stages: each problem's running success rate (`ProblemStats`,
written by the correctness reward), the sampler that draws the next batch from it (curriculum,
prioritized, DAPO-style dropping of uniform groups) with state that survives a resume, and
TRL's RepeatSampler made resumable in any epoch."""
from __future__ import annotations

import os

import torch
from torch.utils.data import Sampler
from trl.trainer.utils import RepeatSampler

from posttrain.config.rl import ProblemSamplingConfig

SAMPLER_STATE = "problem_sampler.json"


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
