"""The one sampling loop: batched, left-padded, KV-cached generation used by evaluation, rejection
sampling, distillation data and the base-model probe."""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from tqdm.auto import tqdm

from posttrain.chat import ChatConfig, render_prompt, to_canonical


@dataclass(frozen=True)
class Generation:
    text: str          # decoded completion, special tokens dropped (<think> is not special)
    num_tokens: int    # completion tokens up to and including eos
    truncated: bool    # hit max_new_tokens without eos


def generate_replies(model, tokenizer, chat: ChatConfig, requests: list[tuple[list[dict], bool | None]],
                     **options) -> list[list[Generation]]:
    """Replies to (conversation, thinking mode) requests, rendered the way the model family reads
    the mode switch; each reply's text is whole (a template's pre-filled empty think block put back)
    and in the canonical think markers. `options` as `generate` takes them."""
    rendered = [render_prompt(tokenizer, chat, turns, thinking) for turns, thinking in requests]
    outputs = generate(model, tokenizer, [prompt for prompt, _ in rendered], **options)
    return [[replace(g, text=to_canonical(prefill + g.text, chat)) for g in gens]
            for (_, prefill), gens in zip(rendered, outputs)]


@torch.inference_mode()
def generate(model, tokenizer, prompts: list[str], *, max_new_tokens: int, batch_size: int = 64,
             do_sample: bool = False, temperature: float = 1.0, top_p: float = 1.0,
             num_samples: int = 1, seed: int = 0, desc: str = "generating") -> list[list[Generation]]:
    """Return, for each prompt, `num_samples` generations (greedy when do_sample is False)."""
    was_training, padding_side = model.training, tokenizer.padding_side
    model.eval()
    tokenizer.padding_side = "left"  # batched decoding continues every row from its last prompt token
    torch.manual_seed(seed)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    results: list[list[Generation]] = [[] for _ in prompts]
    eos = tokenizer.eos_token_id
    prompt_batch = max(1, batch_size // num_samples)
    with tqdm(total=len(prompts) * num_samples, desc=desc, unit="gen", leave=False) as bar:
        for start in range(0, len(order), prompt_batch):
            idx = order[start:start + prompt_batch]
            enc = tokenizer([prompts[i] for i in idx], return_tensors="pt", padding=True,
                            add_special_tokens=False)
            out = model.generate(
                **enc, max_new_tokens=max_new_tokens, do_sample=do_sample,
                temperature=temperature if do_sample else None, top_p=top_p if do_sample else None,
                top_k=None, num_return_sequences=num_samples, eos_token_id=eos,
                pad_token_id=tokenizer.pad_token_id,
            )
            completion_ids = out[:, enc["input_ids"].shape[1]:]
            for row, ids in enumerate(completion_ids.tolist()):
                n = len(ids)
                if eos in ids:
                    n = ids.index(eos) + 1
                truncated = eos not in ids
                ids = [t for t in ids[:n] if t != tokenizer.pad_token_id]
                text = tokenizer.decode(ids, skip_special_tokens=True)
                results[idx[row // num_samples]].append(Generation(text, n, truncated))
            bar.update(len(idx) * num_samples)
    model.train(was_training)
    tokenizer.padding_side = padding_side
    return results
