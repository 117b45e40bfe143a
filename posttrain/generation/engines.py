"""The one sampling loop: batched, left-padded, KV-cached generation used by evaluation, rejection
sampling, distillation data and the base-model probe.

The loop is ours rather than `model.generate` because it drops a row from the batch as soon as it
has ended and keeps the KV cache in preallocated buffers: `generate` keeps decoding finished rows
and grows its cache by concatenation (69% of a CPU evaluation's time went to `torch.cat`), and
transformers' continuous batching (`generate_batch`) was 10x slower on CPU. What picks each token is
transformers' own: the model's generation config merged with the call's options, and the logits
processors `generate` would build from it. Where one of them keeps per-row state (a repetition
penalty, an n-gram ban: rows cannot leave the batch under it), the batch goes to `model.generate`.
Greedy replies are token for token those of `model.generate`; measured in
bench/results/generation.md (bench/generation.py).

On a GPU the same `generate` can run on vLLM's offline engine instead (`backend: vllm`,
`load_generator`): the call's options become vLLM's sampling parameters, and a thinking budget is
applied in rounds (think up to the budget, insert the stop-thinking sentence, answer).
"""
from __future__ import annotations

import gc
import inspect
import random
from dataclasses import dataclass, field, replace

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

from posttrain.chat import ChatConfig, render_prompt, rendered_mode, to_canonical


@dataclass(frozen=True)
class Generation:
    text: str          # decoded completion, special tokens dropped (<think> is not special)
    num_tokens: int    # completion tokens up to and including eos
    truncated: bool    # hit max_new_tokens without eos
    budget_cut: bool = False   # the thinking budget ended the think block (ThinkingBudget)
    thinking: bool | None = None   # the mode its prompt was rendered in (posttrain.chat.rendered_mode)




@dataclass(frozen=True)
class ThinkingBudget:
    """Qwen3's thinking budget: when a think block reaches `tokens` tokens without closing, the
    stop-thinking sentence and the close marker are inserted and decoding goes on with the answer
    (0: the sentence at once). Markers and sentence are the model family's (`base.chat`)."""

    tokens: int
    sentence: str = ChatConfig().stop_thinking
    think_open: str = ChatConfig().think_open
    think_close: str = ChatConfig().think_close

    def inserted(self) -> str:
        return f"{self.sentence}\n{self.think_close}\n\n"


class _BudgetTracker:
    """Per row: outside or inside the think block, its length so far, and the tokens to force next."""

    BEFORE, THINKING, DONE = range(3)

    def __init__(self, budget: ThinkingBudget, tokenizer, prompts_ids: list[list[int]]):
        encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
        self.budget, self.open, self.close = budget.tokens, encode(budget.think_open), encode(budget.think_close)
        self.forced_ids = encode(budget.inserted())
        self.state, self.count, self.queue, self.cut, self.tail = [], [], [], [], []
        for ids in prompts_ids:
            # a template may open the think block itself (the prompt ends with the open marker)
            opened = _ends_with(ids[-len(self.open) - 2:], self.open, allow_trailing=2)
            self.state.append(self.THINKING if opened else self.BEFORE)
            self.count.append(0)
            self.queue.append(list(self.forced_ids) if opened and self.budget == 0 else [])
            self.cut.append(opened and self.budget == 0)
            self.tail.append([])

    def steer(self, rows: list[int], tokens: list[int]) -> list[int]:
        """This step's tokens with forced ones in place of the picked; every row's state advanced."""
        out = []
        for row, token in zip(rows, tokens):
            if self.queue[row]:
                token = self.queue[row].pop(0)
            out.append(token)
            tail = self.tail[row]
            tail.append(token)
            del tail[:-max(len(self.open), len(self.close))]
            if self.state[row] == self.BEFORE and _ends_with(tail, self.open):
                self.state[row] = self.THINKING
            elif self.state[row] == self.THINKING:
                if _ends_with(tail, self.close):
                    self.state[row] = self.DONE
                    continue
                self.count[row] += 1
            else:
                continue
            if self.state[row] == self.THINKING and self.count[row] >= self.budget and not self.queue[row]:
                self.queue[row], self.cut[row], self.state[row] = list(self.forced_ids), True, self.DONE
        return out


def _ends_with(tokens: list[int], marker: list[int], allow_trailing: int = 0) -> bool:
    """Whether `marker` ends `tokens`, or ends them but for up to `allow_trailing` tokens after it."""
    for extra in range(allow_trailing + 1):
        end = len(tokens) - extra
        if marker and end >= len(marker) and tokens[end - len(marker):end] == marker:
            return True
    return False


def generate_replies(model, tokenizer, chat: ChatConfig, requests: list[tuple[list[dict], bool | None]],
                     **options) -> list[list[Generation]]:
    """Replies to (conversation, thinking mode) requests, rendered the way the model family reads
    the mode switch; each reply's text is whole (a template's pre-filled empty think block put back)
    and in the canonical think markers. `options` as `generate` takes them."""
    rendered = [render_prompt(tokenizer, chat, turns, thinking) for turns, thinking in requests]
    modes = [rendered_mode(tokenizer, chat, turns, thinking) for turns, thinking in requests]
    outputs = generate(model, tokenizer, [prompt for prompt, _ in rendered], **options)
    return [[replace(g, text=to_canonical(prefill + g.text, chat), thinking=mode) for g in gens]
            for (_, prefill), mode, gens in zip(rendered, modes, outputs)]


class GenerationEngine:
    """What writes replies: `generate(tokenizer, prompts, **options)` with `generate`'s options below,
    `num_parameters()`, and `close()` to hand back what it holds. HFEngine (our loop over a
    transformers model) and VLLMEngine (vLLM's offline engine) are the two; `load_generator` picks."""

    def generate(self, tokenizer, prompts: list[str], **options) -> list[list[Generation]]:
        raise NotImplementedError

    def num_parameters(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass


class HFEngine(GenerationEngine):
    """Our batched, KV-cached loop over a transformers model (backend hf)."""

    def __init__(self, model):
        self.model = model

    def generate(self, tokenizer, prompts: list[str], **options) -> list[list[Generation]]:
        return _hf_generate(self.model, tokenizer, prompts, **options)

    def num_parameters(self) -> int:
        return self.model.num_parameters()

    def close(self) -> None:
        self.model = None
        gc.collect()


def as_engine(model) -> GenerationEngine:
    """An engine as it is; a transformers model (what training stages and probes hold) in our loop."""
    return model if isinstance(model, GenerationEngine) else HFEngine(model)


def generate(model, tokenizer, prompts: list[str], *, max_new_tokens: int, batch_size: int = 128,
             do_sample: bool = False, temperature: float = 1.0, top_p: float = 1.0,
             num_samples: int = 1, seed: int = 0, desc: str = "generating",
             thinking_budget: ThinkingBudget | None = None) -> list[list[Generation]]:
    """Return, for each prompt, `num_samples` generations (greedy when do_sample is False).
    Sampling draws from its own generator seeded with `seed`: the global RNG is left alone.
    `model`: a GenerationEngine (`load_generator`) or a transformers model; on vLLM `batch_size` is
    vLLM's to choose."""
    return as_engine(model).generate(tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size,
                                     do_sample=do_sample, temperature=temperature, top_p=top_p,
                                     num_samples=num_samples, seed=seed, desc=desc, thinking_budget=thinking_budget)


@torch.inference_mode()
def _hf_generate(model, tokenizer, prompts: list[str], *, max_new_tokens: int, batch_size: int,
                 do_sample: bool, temperature: float, top_p: float, num_samples: int, seed: int, desc: str,
                 thinking_budget: ThinkingBudget | None) -> list[list[Generation]]:
    was_training, padding_side = model.training, tokenizer.padding_side
    model.eval()
    tokenizer.padding_side = "left"  # batched decoding continues every row from its last prompt token
    options = dict(do_sample=do_sample, temperature=temperature if do_sample else None,
                   top_p=top_p if do_sample else None, top_k=None, max_new_tokens=max_new_tokens)
    generator = torch.Generator().manual_seed(seed)
    stop_ids = _stop_ids(model, tokenizer)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    results: list[list[Generation]] = [[] for _ in prompts]
    prompt_batch = max(1, batch_size // num_samples)
    try:
        with tqdm(total=len(prompts) * num_samples, desc=desc, unit="gen", leave=False) as bar:
            for start in range(0, len(order), prompt_batch):
                idx = order[start:start + prompt_batch]
                enc = tokenizer([prompts[i] for i in idx], return_tensors="pt", padding=True,
                                add_special_tokens=False)
                ids, mask = (enc[k].repeat_interleave(num_samples, dim=0) for k in ("input_ids", "attention_mask"))
                ids, mask = ids.to(model.device), mask.to(model.device)
                pick = TokenPicker(model, ids, generator, **options)
                budget = None
                if thinking_budget is not None:
                    budget = _BudgetTracker(thinking_budget, tokenizer,
                                            [row[m.bool()].tolist() for row, m in zip(ids.cpu(), mask.cpu())])
                if pick.stateful and budget is None:
                    completions = _transformers_generate(model, ids, mask, stop_ids, seed + start, **options)
                else:
                    completions = decode(model, ids, mask, stop_ids=stop_ids, pick=pick, max_new_tokens=max_new_tokens,
                                         budget=budget)
                for row, tokens in enumerate(completions):
                    ended = bool(tokens) and tokens[-1] in stop_ids
                    kept = [t for t in tokens if t != tokenizer.pad_token_id]
                    text = tokenizer.decode(kept, skip_special_tokens=True)
                    cut = bool(budget and budget.cut[row])
                    results[idx[row // num_samples]].append(Generation(text, len(tokens), not ended, cut))
                bar.update(len(idx) * num_samples)
    finally:
        model.train(was_training)
        tokenizer.padding_side = padding_side
    return results


def decode(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, max_new_tokens: int,
           stop_ids: set[int], pick: TokenPicker, budget: _BudgetTracker | None = None,
           logprobs: list[list[float]] | None = None, logprob_temperature: float = 1.0) -> list[list[int]]:
    """Completion token ids of each left-padded row, each ending at its first stop id (included) or
    after max_new_tokens. A row that has stopped leaves the batch and its cache. With a thinking
    budget, its forced tokens replace the picked ones. Given a `logprobs` list, it is filled with
    each row's log-probability of each of its tokens under softmax(logits / logprob_temperature),
    the distribution TRL's trainer scores a completion with."""
    cache = _preallocated_cache(model, input_ids.shape[1] + max_new_tokens)
    cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    completions: list[list[int]] = [[] for _ in range(input_ids.shape[0])]
    alive = list(range(input_ids.shape[0]))
    step_ids, mask = input_ids, attention_mask
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # as generate: left padding shifts no position
    if logprobs is not None:
        logprobs[:] = [[] for _ in range(input_ids.shape[0])]
    for _ in range(max_new_tokens):
        logits = model(input_ids=step_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                       logits_to_keep=1, **{cache_arg: cache}).logits[:, -1, :].float()
        next_ids = pick(logits, alive)
        tokens = next_ids.tolist()
        if budget is not None:
            tokens = budget.steer(alive, tokens)
            next_ids = torch.tensor(tokens, dtype=next_ids.dtype, device=next_ids.device)
        for row, token in zip(alive, tokens):
            completions[row].append(token)
        if logprobs is not None:
            drawn = torch.log_softmax(logits / logprob_temperature, dim=-1).gather(1, next_ids[:, None].to(logits.device))
            for row, value in zip(alive, drawn.squeeze(1).tolist()):
                logprobs[row].append(value)
        keep = [i for i, token in enumerate(tokens) if token not in stop_ids]
        if not keep:
            break
        if len(keep) < len(alive):
            index = torch.tensor(keep, device=next_ids.device)
            cache.batch_select_indices(index)
            alive = [alive[i] for i in keep]
            next_ids, mask, positions = next_ids[index], mask[index], positions[index]
        mask = torch.cat([mask, mask.new_ones(len(alive), 1)], dim=1)
        positions = positions[:, -1:] + 1
        step_ids = next_ids[:, None]
    return completions


class TokenPicker:
    """Picks each row's next token as `generate` would: the model's generation config (or the one
    given) updated with the call's options, its logits processors, then argmax or a draw from
    `generator` (None: torch's global RNG, as `generate` draws). With `whole_batch`, every draw is
    made for the whole batch, rows that have ended included, as `generate` makes it: the rows still
    decoding then get the very tokens `generate` would give them from the same RNG state."""

    STATELESS = ("TemperatureLogitsWarper", "TopPLogitsWarper", "TopKLogitsWarper", "MinPLogitsWarper",
                 "SuppressTokensLogitsProcessor")

    def __init__(self, model, input_ids: torch.Tensor, generator: torch.Generator | None, *,
                 generation_config=None, whole_batch: bool = False, **options):
        config, _ = model._prepare_generation_config(generation_config, **options)
        self.processors = model._get_logits_processor(config, input_ids_seq_length=input_ids.shape[1],
                                                      encoder_input_ids=input_ids, device=input_ids.device, model_kwargs={})
        self.sample, self.generator = bool(config.do_sample), generator
        self.batch = input_ids.shape[0] if whole_batch else None
        # a processor that reads the tokens so far or holds a value per row cannot follow rows out of the batch
        self.stateful = any(type(p).__name__ not in self.STATELESS for p in self.processors)

    def __call__(self, logits: torch.Tensor, rows: list[int] | None = None) -> torch.Tensor:
        """`rows`: the batch rows `logits` belong to (all of them when None)."""
        scores = self.processors(None, logits) if self.processors else logits
        if not self.sample:
            return scores.argmax(dim=-1)
        probs = torch.softmax(scores, dim=-1)
        index = None
        if self.batch is not None and rows is not None and len(rows) < self.batch:
            index = torch.tensor(rows, device=probs.device)
            whole = probs.new_zeros(self.batch, probs.shape[-1])
            whole[:, 0] = 1.0   # an ended row's draw is thrown away; it only has to use up its share
            probs = whole.index_copy_(0, index, probs)
        device = self.generator.device if self.generator is not None else probs.device
        drawn = torch.multinomial(probs.to(device), 1, generator=self.generator).squeeze(1).to(logits.device)
        return drawn if index is None else drawn[index]


def _transformers_generate(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, stop_ids: set[int],
                           seed: int, **options) -> list[list[int]]:
    """`model.generate` on one batch, each row cut after its first stop id; its sampling draws from
    the global RNG, seeded here and restored after."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, eos_token_id=sorted(stop_ids),
                             pad_token_id=model.generation_config.pad_token_id, **options)
    rows = out[:, input_ids.shape[1]:].tolist()
    return [row[:next((i + 1 for i, t in enumerate(row) if t in stop_ids), len(row))] for row in rows]


def _stop_ids(model, tokenizer) -> set[int]:
    """The tokenizer's eos and any the model's generation config lists (Qwen3 chat models end a turn
    with <|im_end|> and a document with <|endoftext|>)."""
    return _stop_ids_of(getattr(getattr(model, "generation_config", None), "eos_token_id", None), tokenizer)


def _stop_ids_of(configured, tokenizer) -> set[int]:
    """Those, and the token the chat template ends a turn with (`posttrain.chat.turn_end_id`)."""
    from posttrain.chat import turn_end_id

    configured = configured if isinstance(configured, list) else [configured]
    turn_end = turn_end_id(tokenizer) if getattr(tokenizer, "chat_template", None) else None
    return {t for t in [tokenizer.eos_token_id, turn_end, *configured] if t is not None}


class _PreallocatedLayer(DynamicLayer):
    """A full-attention cache layer writing into buffers sized once for prompt + completion,
    instead of concatenating a new tensor every token."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity, self.length = capacity, 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.device = key_states.device
            batch, heads, _, dim = key_states.shape
            self._keys = key_states.new_empty(batch, heads, self.capacity, dim)
            self._values = value_states.new_empty(batch, value_states.shape[1], self.capacity, value_states.shape[-1])
            self.is_initialized = True
        end = self.length + key_states.shape[-2]
        self._keys[:, :, self.length:end] = key_states
        self._values[:, :, self.length:end] = value_states
        self.length = end
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._keys, self._values = self._keys[indices], self._values[indices]
            self.keys, self.values = self._keys[:, :, :self.length], self._values[:, :, :self.length]


def _preallocated_cache(model, capacity: int) -> Cache:
    """The cache `generate` would build for this model (sliding-window layers stay as they are),
    its full-attention layers preallocated."""
    cache = DynamicCache(config=model.config)
    if not cache.layers:
        return Cache(layer_class_to_replicate=lambda: _PreallocatedLayer(capacity))
    cache.layers = [_PreallocatedLayer(capacity) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


# ----------------------------------------------------------------------------- vLLM backend

_VLLM_DTYPES = {"auto": "auto", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# Generation-config settings the hf path applies and vLLM's sampler has no equivalent for, with
# their neutral values: a checkpoint that sets one would be sampled differently, so it is refused.
_VLLM_UNSUPPORTED = {
    "no_repeat_ngram_size": (None, 0), "encoder_no_repeat_ngram_size": (None, 0), "suppress_tokens": (None, []),
    "begin_suppress_tokens": (None, []), "bad_words_ids": (None, []), "sequence_bias": (None, {}),
    "typical_p": (None, 1.0), "epsilon_cutoff": (None, 0.0), "eta_cutoff": (None, 0.0),
    "encoder_repetition_penalty": (None, 1.0), "forced_bos_token_id": (None,), "forced_eos_token_id": (None,),
    "min_length": (None, 0), "min_new_tokens": (None, 0), "exponential_decay_length_penalty": (None,),
}


def vllm_sampling_kwargs(*, max_tokens: int, do_sample: bool, temperature: float, top_p: float, seed: int,
                         stop_ids: set[int], model_defaults: dict | None = None) -> dict:
    """vLLM `SamplingParams` arguments for one request, picking tokens as the hf path does: the call's
    options over the checkpoint's generation config, top-k off (the hf path passes top_k=None),
    greedy as temperature 0, the checkpoint's repetition penalty always and its min-p when sampling."""
    defaults = model_defaults or {}
    unsupported = [f"{name}={defaults[name]!r}" for name, neutral in _VLLM_UNSUPPORTED.items()
                   if defaults.get(name) not in neutral]
    if unsupported:
        raise ValueError(f"the checkpoint's generation config sets {', '.join(unsupported)}, which vLLM's sampler "
                         "cannot apply: generate with backend hf, or remove it from generation_config.json")
    kwargs = dict(n=1, max_tokens=max_tokens, stop_token_ids=sorted(stop_ids), seed=seed, top_k=0,
                  temperature=float(temperature) if do_sample else 0.0, top_p=float(top_p) if do_sample else 1.0)
    if defaults.get("repetition_penalty") not in (None, 1.0):
        kwargs["repetition_penalty"] = float(defaults["repetition_penalty"])
    if do_sample and defaults.get("min_p") not in (None, 0.0):
        kwargs["min_p"] = float(defaults["min_p"])
    return kwargs


@dataclass
class _Row:
    """One reply being written in rounds: its prompt, what it has so far, where it is in its think block."""

    prompt: list[int]
    seed: int
    state: int = _BudgetTracker.DONE
    tokens: list[int] = field(default_factory=list)
    thought: int = 0        # tokens inside the think block so far
    cut: bool = False
    finished: bool = False


def engine_generate(engine, make_params, prompts_ids: list[list[int]], *, stop_ids: set[int], max_new_tokens: int,
                    do_sample: bool, temperature: float, top_p: float, num_samples: int, seed: int,
                    budget: _BudgetTracker | None = None, model_defaults: dict | None = None) -> list[list[_Row]]:
    """Each prompt's `num_samples` replies from an engine that continues token ids (`engine.generate`
    with vLLM's signature; `make_params` builds its sampling parameters). Every reply is its own
    request with its own seed, drawn from `seed`, so a reply does not depend on what it is batched with.

    With a thinking budget a reply is written in up to three rounds, the way Qwen3's budget is
    applied with vLLM, with the hf path's bookkeeping (`_BudgetTracker`): before its think block it
    stops at the open marker; inside, it may write `budget` more tokens and stops at the close marker;
    a block the budget ended gets the stop-thinking sentence and the close marker; then it answers
    with the tokens left of `max_new_tokens`."""
    rng = random.Random(seed)
    rows = [_Row(prompt=list(ids), seed=rng.getrandbits(62),
                 state=budget.state[i] if budget is not None else _BudgetTracker.DONE)
            for i, ids in enumerate(prompts_ids) for _ in range(num_samples)]
    if budget is not None and (len(budget.open) != 1 or len(budget.close) != 1):
        raise ValueError("a thinking budget on backend vllm needs the think markers to be single tokens (vLLM stops "
                         f"on token ids); this tokenizer splits them into {budget.open} and {budget.close}")
    open_id = budget.open[0] if budget is not None else None
    close_id = budget.close[0] if budget is not None else None
    for row in rows:
        row.cut = row.state == _BudgetTracker.THINKING and row.thought >= budget.budget
    for round_ in range(3):  # before the think block, inside it, the answer: each row moves on or ends
        for row in rows:
            if not row.finished and row.state == _BudgetTracker.THINKING and row.thought >= budget.budget:
                row.tokens += budget.forced_ids[:max_new_tokens - len(row.tokens)]
                row.cut, row.state = True, _BudgetTracker.DONE
                row.finished = len(row.tokens) >= max_new_tokens
        active = [row for row in rows if not row.finished]
        if not active:
            break
        requests, params, limits = [], [], []
        for row in active:
            left = max_new_tokens - len(row.tokens)
            limit, stop = left, set(stop_ids)
            if row.state == _BudgetTracker.BEFORE:
                stop.add(open_id)
            elif row.state == _BudgetTracker.THINKING:
                limit = min(left, budget.budget - row.thought)
                stop.add(close_id)
            requests.append({"prompt_token_ids": row.prompt + row.tokens})
            params.append(make_params(**vllm_sampling_kwargs(
                max_tokens=limit, do_sample=do_sample, temperature=temperature, top_p=top_p,
                seed=(row.seed + round_) % 2**62, stop_ids=stop, model_defaults=model_defaults)))
            limits.append(limit)
        outputs = engine.generate(requests, params, use_tqdm=False)
        for row, output, limit in zip(active, outputs, limits, strict=True):
            new = list(output.outputs[0].token_ids)
            row.tokens += new
            last = new[-1] if new else None
            marker = None
            if row.state == _BudgetTracker.BEFORE and last == open_id:
                marker, row.state = open_id, _BudgetTracker.THINKING
            elif row.state == _BudgetTracker.THINKING:
                # as on the hf path every token of the block but the close marker counts, the end too
                if last == close_id:
                    marker, row.state = close_id, _BudgetTracker.DONE
                row.thought += len(new) - (last == close_id)
            if row.state == _BudgetTracker.THINKING and row.thought >= budget.budget:
                row.cut = True   # the budget is spent: the next round inserts the sentence, if tokens are left
            stopped_short = len(new) < limit and last not in stop_ids and last != marker
            row.finished = last in stop_ids or len(row.tokens) >= max_new_tokens or not new or stopped_short
    if any(not row.finished for row in rows):
        raise RuntimeError("a reply was still being written after its three rounds")
    return [rows[i * num_samples:(i + 1) * num_samples] for i in range(len(prompts_ids))]


class VLLMEngine(GenerationEngine):
    """vLLM's offline engine over one checkpoint (backend vllm); `generate` dispatches to it. Built
    by `load`; the constructor takes the engine and its parameter class as they are, so the rounds
    above can be driven by any object with vLLM's `generate`."""

    def __init__(self, llm, make_params, *, stop_ids: set[int], model_defaults: dict, location: str,
                 trust_remote_code: bool = False):
        self.llm, self.make_params, self.stop_ids = llm, make_params, stop_ids
        self.model_defaults, self.location, self.trust_remote_code = model_defaults, location, trust_remote_code

    @classmethod
    def load(cls, checkpoint, settings, engine, seed: int = 0) -> tuple["VLLMEngine", object]:
        """(engine, tokenizer) over a checkpoint: the model in vLLM with the configured precision and
        GPU share, the tokenizer as `load_checkpoint` prepares it (vLLM picks its own attention kernels)."""
        import vllm
        from transformers import AutoTokenizer, GenerationConfig

        from posttrain.registry.checkpoint import checkpoint_location, prepare_for_chat

        location = checkpoint_location(checkpoint)
        tokenizer = AutoTokenizer.from_pretrained(location, trust_remote_code=settings.trust_remote_code)
        prepare_for_chat(None, tokenizer, settings.chat, location)
        try:
            generation_config = GenerationConfig.from_pretrained(location).to_dict()
        except OSError:   # no generation_config.json: the model config's eos is vLLM's too
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(location, trust_remote_code=settings.trust_remote_code)
            generation_config = {"eos_token_id": getattr(config, "eos_token_id", None)}
        from posttrain.config.trainers import vllm_cpu_build

        # On vLLM's CPU build the KV cache is VLLM_CPU_KVCACHE_SPACE GiB (not a share of GPU memory);
        # eager mode starts in 38 s instead of 50 s with compilation; and a chunked prefill kills the
        # engine as soon as a request carries a seed (vLLM rewinds the request's generator by an
        # offset, which a CPU generator does not have: "CPU Generator does not use offset";
        # bench/results/vllm_cpu.md has the reproduction), so prefills are whole there.
        cpu = {"enforce_eager": True, "enable_chunked_prefill": False} if vllm_cpu_build() else {}
        llm = vllm.LLM(model=location, tokenizer=location, dtype=_VLLM_DTYPES[settings.dtype], seed=seed,
                       gpu_memory_utilization=engine.vllm_gpu_memory_utilization,
                       tensor_parallel_size=engine.vllm_tensor_parallel_size,
                       trust_remote_code=settings.trust_remote_code, **cpu)
        return cls(llm, vllm.SamplingParams, stop_ids=_stop_ids_of(generation_config.get("eos_token_id"), tokenizer),
                   model_defaults=generation_config, location=location,
                   trust_remote_code=settings.trust_remote_code), tokenizer

    def generate(self, tokenizer, prompts: list[str], *, max_new_tokens: int, do_sample: bool = False,
                 temperature: float = 1.0, top_p: float = 1.0, num_samples: int = 1, seed: int = 0,
                 thinking_budget: ThinkingBudget | None = None, batch_size: int | None = None,
                 desc: str | None = None) -> list[list[Generation]]:
        if self.llm is None:
            raise RuntimeError(f"the vLLM engine over {self.location} was closed")
        prompts_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        budget = _BudgetTracker(thinking_budget, tokenizer, prompts_ids) if thinking_budget is not None else None
        replies = engine_generate(self.llm, self.make_params, prompts_ids, stop_ids=self.stop_ids,
                                  max_new_tokens=max_new_tokens, do_sample=do_sample, temperature=temperature,
                                  top_p=top_p, num_samples=num_samples, seed=seed, budget=budget,
                                  model_defaults=self.model_defaults)
        return [[Generation(tokenizer.decode([t for t in row.tokens if t != tokenizer.pad_token_id],
                                             skip_special_tokens=True),
                            len(row.tokens), not (row.tokens and row.tokens[-1] in self.stop_ids), row.cut)
                 for row in rows] for rows in replies]

    def num_parameters(self) -> int:
        """The model's parameter count, from its config alone (vLLM holds the weights)."""
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(self.location, trust_remote_code=self.trust_remote_code)
        with torch.device("meta"):   # shapes only; tied weights stay tied, so they count once
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=self.trust_remote_code)
        return model.num_parameters()

    def close(self) -> None:
        """Shut the engine down and hand its GPU memory back, for the stage's next model."""
        llm, self.llm = self.llm, None
        if llm is None:
            return
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if hasattr(core, "shutdown"):
            core.shutdown()
        del llm
        try:
            from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

            destroy_model_parallel()
            destroy_distributed_environment()
        except ImportError:
            pass
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def load_generator(checkpoint, settings, engine, seed: int = 0):
    """(engine, tokenizer) for `generate` from a checkpoint: our loop over the transformers model
    (`engine.backend` hf) or vLLM's engine over it (vllm). `engine`: a config with `backend`
    (config.GenerationEngine)."""
    if engine.backend == "vllm":
        return VLLMEngine.load(checkpoint, settings, engine, seed)
    from posttrain.registry.checkpoint import load_checkpoint

    model, tokenizer = load_checkpoint(checkpoint, for_training=False, settings=settings)
    if torch.cuda.is_available():   # the hf loop on the machine's GPU when it has one (training stages: TRL places them)
        model.to("cuda")
    return HFEngine(model), tokenizer


def release(model) -> None:
    """Free what `load_generator` loaded: vLLM's engine holds GPU memory until it is shut down."""
    if isinstance(model, GenerationEngine):
        model.close()
