"""The RL stages' settings beside their trainer's: reward weights, reward settings, the problem
sampler and the health alerts."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from posttrain.config.gates import Strict
from posttrain.config.trainers import GenerationEngine


class RewardWeights(Strict):
    """Weight of each reward in the registry (posttrain.rewards); 0 leaves it out."""

    correctness: float = Field(1.0, ge=0)
    format: float = Field(0.2, ge=0)
    mode: float = Field(0.0, ge=0)        # /think vs /no_think compliance on every row (format needs a boxed answer)
    language_consistency: float = Field(0.0, ge=0)
    instruction: float = Field(0.0, ge=0)
    length: float = Field(0.0, ge=0)      # Kimi k1.5 length reward, per prompt group
    overlong: float = Field(0.0, ge=0)    # DAPO soft overlong punishment
    code: float = Field(0.0, ge=0)
    reward_model: float = Field(0.0, ge=0)   # open-ended rows: the reward model's score (stages.reward_model)
    judge: float = Field(0.0, ge=0)          # open-ended rows with a reference answer: the judge's verdict
    tool: float = Field(0.0, ge=0)           # tool-use episodes: the environment's final state and the reply

    @model_validator(mode="after")
    def _something_to_learn(self):
        if not any(v > 0 for v in self.model_dump().values()):
            raise ValueError("every reward weight is 0: the stage would learn nothing")
        return self


class RewardSettings(Strict):
    length_warmup_steps: int = Field(0, ge=0)   # Kimi: length reward off until this step
    overlong_cache: int = Field(32, ge=1)       # DAPO L_cache (L_max is max_completion_length)
    # the reward model's score less, per group, what a straight line in the reply's length explains
    reward_model_length_debias: bool = False
    reward_model_batch_size: int = Field(16, ge=1)     # conversations per forward pass of the reward model
    reward_model_max_length: int = Field(512, ge=16)   # a longer rendering keeps its last tokens


class ProblemSamplingConfig(Strict):
    """How reasoning RL picks the next problems (posttrain.rl.sampling.ProblemSampler)."""

    strategy: Literal["uniform", "prioritized"] = "uniform"
    floor: float = Field(0.1, ge=0, le=1)          # share of probability spread evenly over all problems
    prior_success: float = Field(0.5, ge=0, le=1)  # s_i of a problem not yet seen
    curriculum: bool = False                       # easy -> hard by world level
    curriculum_fraction: float = Field(0.5, gt=0, le=1)  # share of training until every level is open
    drop_uniform_groups: bool = False              # DAPO: all-correct / all-wrong groups leave the loss


class RLAlertsConfig(Strict):
    """Health checks on every logged RL step (posttrain.rl.alerts.RLAlerts); NaN/inf loss or grad always alerts."""

    action: Literal["warn", "fail"] = "warn"
    kl_max: float | None = Field(None, gt=0)         # only meaningful with beta > 0
    zero_reward_steps: int = Field(10, ge=1)         # consecutive logged steps with reward exactly 0
    # share of re-scored rollouts whose task reward differs from evaluation's verdict (posttrain.rl.rewards.EvalDisagreement)
    eval_disagreement_max: float = Field(0.01, ge=0, le=1)
    truncation_max: float = Field(0.5, ge=0, le=1)   # share of completions hitting max_completion_length
    uniform_groups_max: float = Field(0.9, ge=0, le=1)  # share of groups with identical rewards
    # mean |log pi_trainer - log pi_behaviour| per completion token: rollouts drawn by a policy (or an
    # engine) other than the one trained, async rollouts' or TRL's vLLM path's
    logprob_mismatch_max: float | None = Field(0.1, gt=0)
    # Goodhart: the reward model's raw score rose while the independent check of the same replies fell
    # by at least `goodhart_drop`, the latest half of `goodhart_window` logged steps against the half
    # before it and against the run's first half window; `goodhart_confidence` is the score test's and,
    # shared out over every test of the run, the check test's (posttrain.rl.alerts.RLAlerts.goodhart)
    goodhart_window: int = Field(10, ge=4)
    goodhart_drop: float = Field(0.05, gt=0, le=1)
    goodhart_confidence: float = Field(0.95, ge=0.5, lt=1)


class JudgeConfig(GenerationEngine):
    """The generative judge of the `judge` reward (posttrain.rewards.judge): a model generated here
    (`model`, on `backend`) or an OpenAI-compatible server (`endpoint` + `served_model`)."""

    model: str | None = None            # a directory or HF id
    endpoint: str | None = None         # e.g. http://127.0.0.1:8000 (`vllm serve <judge>`)
    served_model: str | None = None     # the model name the endpoint serves
    api_key_env: str | None = None      # environment variable holding the endpoint's key (never the key)
    # sent with each endpoint request, e.g. {enable_thinking: false} to a Qwen3 judge on vLLM's server
    chat_template_kwargs: dict[str, bool | int | float | str] | None = None
    template: str | None = None         # {question}, {reference}, {response}; None: after Qwen3 (judge.DEFAULT_TEMPLATE)
    max_new_tokens: int = Field(64, ge=4)
    batch_size: int = Field(16, ge=1)   # local batch, or concurrent requests to the endpoint
    timeout_s: float = Field(60.0, gt=0)    # per request
    retries: int = Field(2, ge=0)
    deadline_s: float = Field(600.0, gt=0)  # per reward call: what is not judged by then scores 0, counted

    @model_validator(mode="after")
    def _one_judge(self):
        if (self.model is None) == (self.endpoint is None):
            raise ValueError("give the judge either `model` (generated here) or `endpoint` (an OpenAI-compatible server)")
        if self.endpoint is not None and not self.served_model:
            raise ValueError("an endpoint judge needs `served_model`: the model name the server serves")
        if self.template is not None:
            missing = [f for f in ("{question}", "{reference}", "{response}") if f not in self.template]
            if missing:
                raise ValueError(f"judge template lacks {', '.join(missing)}")
        return self
