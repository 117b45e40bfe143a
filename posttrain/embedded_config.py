"""Settings of the embedded world (`world:` and the tiny models' shapes and pretraining in `base:`).

Plain pydantic, outside the world package, so that a config validates without importing the world:
a pipeline on a user's own model and data never loads it.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class CorpusConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    math_documents: int = 30000
    direct_documents: int = 3000
    mixed_language_share: float = 0.3   # of Chinese solutions with English steps mixed in
    mixed_step_share: float = 0.4        # of steps switched inside such a solution
    levels: list[int] = [1, 2]
    word_share: float = 0.3              # word problems vs bare expressions



class Architecture(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hidden_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 768
    max_position_embeddings: int = 512



class PretrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    steps: int = 600
    batch_size: int = 24
    sequence_length: int = 192
    learning_rate: float = 3e-3
    warmup_steps: int = 30
    weight_decay: float = 0.01
    threads: int = 2
    probe_problems: int = 200
    probe_every: int = 0  # also probe held-out accuracy every N steps (learning-curve record)



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

