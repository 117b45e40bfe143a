"""Tiny Qwen3 models for the embedded world: the teacher/policy and the distillation student."""
from __future__ import annotations

import torch
from transformers import GenerationConfig, PreTrainedTokenizerBase, Qwen3Config, Qwen3ForCausalLM

from posttrain.config.embedded import Architecture  # noqa: F401 (re-exported)


def build_model(arch: Architecture, tokenizer: PreTrainedTokenizerBase, seed: int) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=arch.hidden_size,
        intermediate_size=arch.intermediate_size,
        num_hidden_layers=arch.num_hidden_layers,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_key_value_heads,
        # Qwen3's default head_dim is 128 whatever the width; a tiny model must set it.
        head_dim=arch.hidden_size // arch.num_attention_heads,
        max_position_embeddings=arch.max_position_embeddings,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=False,
    )
    return model


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
