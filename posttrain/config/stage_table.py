"""A row of the chain's stage table (posttrain.config.pipeline.STAGE_TABLE)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel


@dataclass(frozen=True)
class Stage:
    """One step of the chain, written once; config, prepared data, the chain, checkpoints and
    launchers read it."""

    name: str
    config: type[BaseModel]              # its `stages.<name>` section
    reads: tuple[str, ...] = ()          # data roles it needs (the run refuses to start without them)
    optional: tuple[str, ...] = ()       # data roles it reads when the config gives them
    student: bool = False                # trains `base.student` (checked before any work)
    probe: bool = False                  # watches the held-out math suite while it trains (rl.png)
    single_process: str | None = None    # why it cannot run under a multi-process launcher
    # "makes": produces the chain's reward model (StageResult.reward_model); "uses": is handed it
    reward_model: str | None = None
    # config -> why the stage has nothing to do in this run (recorded as skipped), or None
    skipped_unless: Callable[[Any], str | None] | None = None

    @property
    def roles(self) -> tuple[str, ...]:
        return self.reads + self.optional

    @property
    def rewarded(self) -> bool:
        """An RL stage: every row kind it reads must be paid by one of its weighted rewards."""
        return "rewards" in self.config.model_fields
