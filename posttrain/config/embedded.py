"""Settings of the embedded world (`world:` and the tiny models' shapes and pretraining in `base:`).

Plain pydantic, outside the world package, so that a config validates without importing the world:
a pipeline on a user's own model and data never loads it.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator


class CorpusConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    math_documents: int = Field(30000, ge=1)
    direct_documents: int = Field(3000, ge=1)
    mixed_language_share: float = Field(0.3, ge=0, le=1)   # of Chinese solutions with English steps mixed in
    mixed_step_share: float = Field(0.4, ge=0, le=1)        # of steps switched inside such a solution
    levels: list[Annotated[int, Field(ge=1, le=3)]] = Field([1, 2], min_length=1)
    word_share: float = Field(0.3, ge=0, le=1)              # word problems vs bare expressions



class Architecture(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hidden_size: int = Field(256, ge=1)
    num_hidden_layers: int = Field(4, ge=1)
    num_attention_heads: int = Field(4, ge=1)
    num_key_value_heads: int = Field(2, ge=1)
    intermediate_size: int = Field(768, ge=1)
    max_position_embeddings: int = Field(512, ge=1)

    @model_validator(mode="after")
    def _heads_divide(self):
        if self.hidden_size % self.num_attention_heads or self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads, and num_attention_heads of "
                             "num_key_value_heads")
        return self



class PretrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    steps: int = Field(600, ge=1)
    batch_size: int = Field(24, ge=1)
    sequence_length: int = Field(192, ge=8)
    learning_rate: float = Field(3e-3, gt=0)
    warmup_steps: int = Field(30, ge=0)
    weight_decay: float = Field(0.01, ge=0)
    threads: int = Field(2, ge=1)
    probe_problems: int = Field(200, ge=1)
    probe_every: int = Field(0, ge=0)  # also probe held-out accuracy every N steps (learning-curve record)



class WorldConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int = Field(1234, ge=0)
    # math difficulty levels (posttrain.world.tasks.LEVELS: 1 to 3) of train and eval
    levels: list[Annotated[int, Field(ge=1, le=3)]] = Field([1, 2], min_length=1)
    corpus: CorpusConfig = CorpusConfig()
    math_train: int = Field(20000, ge=100)
    direct_train: int = Field(4000, ge=10)
    instruction_train: int = Field(4000, ge=10)
    eval_math_per_language: int = Field(200, ge=10)
    eval_no_think: int = Field(100, ge=10)
    eval_instruction: int = Field(144, ge=9)
    eval_direct: int = Field(100, ge=10)
    # The open-ended kind (posttrain.world.open_tasks): one pool split into sloppy demonstrations,
    # preference pairs, general RL's and distillation's prompts; and its held-out suite.
    open_train: int = Field(3000, ge=20)
    eval_open: int = Field(100, ge=10)
    # Tool use (posttrain.world.tool_tasks): one pool split into demonstrations for the cold start
    # and fusion and general RL's prompts; and its held-out suite (with and without the tools).
    tool_train: int = Field(1200, ge=20)
    eval_tool: int = Field(150, ge=9)
    tool_markers: bool = False   # Qwen3's tool-call markers as tokens (posttrain.world.tokenizer)

