"""The gate section of the pipeline config: what each stage's gate checks (targets, regression
checks against the parent, carried checks) and what all gates share. posttrain.evaluation.gates applies them."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class GateTarget(Strict):
    """One check. Exactly one of: `min`/`max` (absolute), `above` (significantly above the named
    stage, paired CI), `not_below` (not significantly below it), `ratio_min` (value / named stage's
    value). Stage references: a stage name, `parent`, or `base`. Metrics prefixed `stage.` read the
    stage's own training metrics (e.g. `stage.kept_rows`)."""

    metric: str
    min: float | None = None
    max: float | None = None
    above: str | None = None
    not_below: str | None = None
    ratio_min: float | None = Field(None, gt=0)
    of: str | None = None
    # On the thinking-budget curve of the suite named by `metric` (evaluation.budget_curve):
    # nondecreasing: no budget step lowers accuracy significantly (paired CI); dial: the smallest
    # nonzero budget is significantly below unlimited (a flat curve means the dial does nothing);
    # unlimited_not_below_think: unlimited is not significantly below the suite's plain score.
    curve: Literal["nondecreasing", "dial", "unlimited_not_below_think"] | None = None

    @model_validator(mode="after")
    def _one_kind(self):
        kinds = [k for k in ("min", "max", "above", "not_below", "ratio_min", "curve") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"gate target on {self.metric!r} needs exactly one of min, max, above, not_below, "
                             f"ratio_min, curve (got {kinds or 'none'})")
        if self.ratio_min is not None and not self.of:
            raise ValueError(f"gate target ratio_min on {self.metric!r} needs `of: <stage>`")
        return self

    def references(self) -> list[str]:
        return [r for r in (self.above, self.not_below, self.of) if r is not None]


class RegressionCheck(Strict):
    """A capability that must not fall below the parent's by more than `max_drop` (absolute),
    beyond noise (posttrain.evaluation.gates)."""

    metric: str
    max_drop: float | None = Field(None, ge=0, le=1)   # None: gates.max_drop
    origin: str | None = None                          # the earlier stage whose gate declared it (carried)


class GateConfig(Strict):
    targets: list[GateTarget] = []
    # Capabilities (`<suite>/<metric>`, or {metric, max_drop}) that must not regress against the parent.
    regression: list[str | RegressionCheck] = []
    # By default a gate also checks every capability an earlier stage's gate checked; opt out by
    # metric, with the reason (recorded in the verdict).
    carry_forward: bool = True
    opt_out: dict[str, str] = {}
    # A student against its teacher: carried capabilities as ratios student / teacher >= this.
    carry_ratio: float | None = Field(None, gt=0, le=1)

    @field_validator("opt_out")
    @classmethod
    def _reasons(cls, value: dict[str, str]) -> dict[str, str]:
        empty = [m for m, reason in value.items() if not str(reason).strip()]
        if empty:
            raise ValueError(f"opting out of {', '.join(empty)} needs a reason")
        return value

    def regression_checks(self, default_max_drop: float) -> list[RegressionCheck]:
        checks = [RegressionCheck(metric=c) if isinstance(c, str) else c for c in self.regression]
        return [c if c.max_drop is not None else c.model_copy(update={"max_drop": default_max_drop}) for c in checks]

    def metrics(self) -> list[tuple[str, str]]:
        """(where in the gate, metric) of every metric it names."""
        return [*((f"targets[{i}]", t.metric) for i, t in enumerate(self.targets) if t.curve is None),
                *((f"regression[{i}]", c if isinstance(c, str) else c.metric) for i, c in enumerate(self.regression)),
                *((f"opt_out.{m}", m) for m in self.opt_out)]


class GatesConfig(Strict):
    """What every gate shares: the family-wise error of its regression checks (Holm-Bonferroni)
    and the tolerance of a regression check that declares none."""

    alpha: float = Field(0.05, gt=0, lt=0.5)
    max_drop: float = Field(0.0, ge=0, le=1)
