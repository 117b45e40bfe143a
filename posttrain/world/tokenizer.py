"""Character-level tokenizer for the embedded world.

Every digit and every CJK character is its own token: byte-level BPE merges digits, and a tiny model
then cannot learn column arithmetic (measured: after 60 s of pretraining a 3.1M model with a byte-level
BPE wrote `\\boxed{}` in 95% of samples but was almost never right). `<think>`/`</think>` are added
tokens but NOT special, as in Qwen3, so decoding with skip_special_tokens keeps them and the format
and language rewards can see the think block. With `world.tool_markers`, Qwen3's tool-call markers
(`<tool_call>`, `<tool_response>` and their closings) are added tokens the same way, as in Qwen3's
vocabulary: spelled out character by character, one call of the world's store takes 69 tokens
instead of 48. Off by default: four more rows in the embedding change the base model's
initialisation, and with it every number the default chain was calibrated on.
"""
from __future__ import annotations

import string
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from posttrain.chat import CHAT_TEMPLATE, DOC_END, IM_END, IM_START, PAD, THINK_CLOSE, THINK_OPEN, TOOL_MARKERS, UNK

SPECIAL_TOKENS = [PAD, DOC_END, IM_START, IM_END, UNK]


def world_characters() -> list[str]:
    """Every character the generators can emit, found by rendering them (so it never drifts)."""
    from posttrain.world import corpus, tasks

    chars: set[str] = set(string.printable) - set("\t\r\x0b\x0c")
    texts: list[str] = []
    for split in ("train", "eval"):
        for p in tasks.math_problems(400, seed=0, split=split, english_step_share=0.3):
            texts += [p.question, p.reasoning]
        for d in tasks.direct_tasks(400, seed=0, split=split):
            texts += [d.question, d.answer]
        for t in tasks.instruction_tasks(200, seed=0, split=split):
            texts += [t.question, t.gold_response]
    for table in (tasks.TEMPLATES, tasks.CONSTRAINT_PHRASES, tasks.DIRECT_KINDS):
        texts.append(repr(table))
    texts += tasks.NAMES_ZH + tasks.ITEMS_ZH + tasks.WEEKDAYS_ZH + [tasks.number_words_zh(n) for n in range(1000)]
    texts += [o for row in tasks.OPPOSITES for o in row] + corpus.HEADERS
    for text in texts:
        chars.update(text)
    return sorted(chars)


def build_tokenizer(out_dir: Path, tool_markers: bool = False) -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in world_characters():
        vocab.setdefault(ch, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in (THINK_OPEN, THINK_CLOSE, *(TOOL_MARKERS if tool_markers else ()))])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token=IM_END, pad_token=PAD, unk_token=UNK,
        additional_special_tokens=[DOC_END, IM_START], padding_side="left",
        chat_template=CHAT_TEMPLATE, model_max_length=1024,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out_dir)
    return tokenizer
