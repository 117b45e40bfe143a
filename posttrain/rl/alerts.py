"""Health checks on every logged RL step (`RLAlerts`, a TrainerCallback of both RL stages): a
diverged loss, KL past its bound, no reward at all, truncation, training paid otherwise than
evaluation scores, uniform groups, rollouts drawn far from the trained policy, and the reward
model's score rising while the independent check of the same replies falls (Goodhart)."""
from __future__ import annotations

import math
import warnings

from transformers import TrainerCallback

from posttrain.config.rl import RLAlertsConfig

EVAL_DISAGREEMENT = "reward/eval_disagreement"   # logged by posttrain.rl.rewards.EvalDisagreement
# mean |log-prob difference| between the trained and the behaviour policy: async rollouts' and TRL's vLLM path's
LOGPROB_MISMATCH = ("rollout/is_ratio/abs_log_diff", "sampling/sampling_logp_difference/mean")


def _pooled(points: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """(mean raw score, share of the checked replies that pass, replies checked) over logged steps."""
    replies = sum(n for _, _, n in points)
    return (sum(r for r, _, _ in points) / len(points), sum(c * n for _, c, n in points) / replies, replies)


def _step_dispersion(points: list[tuple[float, float, float]]) -> float:
    """How much more the checks move from one logged step to the next than binomial draws of their
    replies would (the successive-difference estimate, which a slow trend barely moves), at least 1."""
    _, share, _ = _pooled(points)
    if not 0 < share < 1 or len(points) < 3:
        return 1.0
    moves = [(b[1] - a[1]) ** 2 / (share * (1 - share) * (1 / a[2] + 1 / b[2])) for a, b in zip(points, points[1:])]
    return max(1.0, sum(moves) / (2 * len(moves)))


class TrainingAlert(RuntimeError):
    """An RL health check failed and the stage is configured to stop on it."""


class RLAlerts(TrainerCallback):
    """Health checks on every logged step. Each alert is recorded once per kind (with the step it
    first fired), and with `action: fail` the stage stops with the message instead of training on."""

    def __init__(self, cfg: RLAlertsConfig, log=print):
        self.cfg = cfg
        self.log = log
        self.fired: list[dict] = []
        self.zero_reward_run = 0
        self.reward_model_trend: list[tuple[float, float, float]] = []   # (raw score, check, replies checked) per logged step
        self.goodhart_tests = 1   # windows the run will test (on_train_begin); each at the run's confidence shared out

    def on_train_begin(self, args, state, control, **kwargs):
        # The check is tested at every logged step, twice: each test at goodhart_confidence fired in
        # make run's own general RL, whose held-out check rose (bench/results/goodhart_false_alarms.md).
        # Bonferroni over the tests makes goodhart_confidence the run's: at 0.95, one false alert in 20 runs.
        logged = math.ceil(state.max_steps / max(1, state.logging_steps or 1)) if state.max_steps > 0 else 1
        self.goodhart_tests = max(1, logged - self.cfg.goodhart_window + 1)

    def check(self, step: int, logs: dict) -> list[tuple[str, str]]:
        """(kind, message) for each check that fails on this logged step."""
        found = []
        for key in ("loss", "grad_norm"):
            if key in logs and not math.isfinite(float(logs[key])):
                found.append(("non_finite", f"{key} is {logs[key]} at step {step}: training diverged"))
        kl = logs.get("kl")
        if kl is not None and self.cfg.kl_max is not None and kl > self.cfg.kl_max:
            found.append(("kl", f"KL {kl:.4f} > alerts.kl_max {self.cfg.kl_max} at step {step} (to the reference; "
                                f"at beta = 0 to the stage's starting policy)"))
        if "reward" in logs:
            self.zero_reward_run = self.zero_reward_run + 1 if logs["reward"] == 0 else 0
            if self.zero_reward_run >= self.cfg.zero_reward_steps:
                found.append(("zero_reward", f"reward has been 0 for {self.zero_reward_run} logged steps (to step "
                              f"{step}): no completion earns any reward; check the prompt format and "
                              f"max_completion_length"))
        truncated = logs.get("completions/clipped_ratio")
        if truncated is not None and truncated > self.cfg.truncation_max:
            found.append(("truncation", f"truncation rate {truncated:.2f} > alerts.truncation_max "
                          f"{self.cfg.truncation_max} at step {step}: raise max_completion_length or add "
                          f"the overlong reward"))
        disagreement = logs.get(EVAL_DISAGREEMENT)
        if disagreement is not None and disagreement > self.cfg.eval_disagreement_max:
            found.append(("eval_disagreement", f"{disagreement:.1%} of re-scored rollouts are paid otherwise than "
                          f"evaluation scores them (> alerts.eval_disagreement_max "
                          f"{self.cfg.eval_disagreement_max:.0%}) at step {step}: training and evaluation disagree "
                          "about the same replies (decoding, truncation or the pre-filled part differ)"))
        for key in LOGPROB_MISMATCH:
            gap = logs.get(key)
            if gap is not None and self.cfg.logprob_mismatch_max is not None and gap > self.cfg.logprob_mismatch_max:
                found.append(("logprob_mismatch", f"{key} {gap:.3f} > alerts.logprob_mismatch_max "
                              f"{self.cfg.logprob_mismatch_max} at step {step}: the rollouts were drawn by a policy far "
                              "from the one trained (stale weights or an engine that samples otherwise); lower "
                              "trainer.max_staleness, sync weights more often, or check the engine's dtype"))
        goodhart = self.goodhart(step, logs)
        if goodhart:
            found.append(("goodhart", goodhart))
        uniform = logs.get("frac_reward_zero_std")
        if uniform is not None and uniform > self.cfg.uniform_groups_max:
            found.append(("uniform_groups", f"{uniform:.0%} of groups have identical rewards (> "
                          f"alerts.uniform_groups_max {self.cfg.uniform_groups_max:.0%}) at step {step}: little "
                          f"signal; consider prioritized sampling, harder problems or a higher temperature"))
        return found

    def goodhart(self, step: int, logs: dict) -> str | None:
        """The reward model's score rising while the independent check of the same replies falls, the
        latest half window against the half before it (a turn) and against the run's first half window
        (a slow slide, which no single window sees). Both must be more than noise: the score's rise a
        one-sided Welch t-test at `goodhart_confidence`; the check's fall a one-sided two-proportion
        test, widened by the dispersion the run's step-to-step checks show (a step checks the replies
        to a few prompts, and one prompt's replies pass or fail together), at the run's confidence
        shared out over every test the run makes (`on_train_begin`)."""
        from statistics import NormalDist

        from scipy.stats import ttest_ind

        from posttrain.rewards.model_based import CHECKED, CHECKED_REPLIES, RAW_SCORE

        if RAW_SCORE not in logs or CHECKED not in logs:
            return None
        self.reward_model_trend.append((float(logs[RAW_SCORE]), float(logs[CHECKED]),
                                        float(logs.get(CHECKED_REPLIES, 1.0))))
        window, half, history = self.cfg.goodhart_window, self.cfg.goodhart_window // 2, self.reward_model_trend
        if len(history) < window:
            return None
        threshold = NormalDist().inv_cdf(1 - (1 - self.cfg.goodhart_confidence) / (2 * self.goodhart_tests))
        dispersion, latest = _step_dispersion(history), history[-half:]
        for before, where in ((history[-window:-half], f"over the {window} logged steps to step {step}"),
                              (history[:half], f"from the run's first {half} logged steps to step {step}")):
            raw, checked, replies = zip(*(_pooled(points) for points in (before, latest)))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # constant scores: no variance, p is nan
                rise = ttest_ind([r for r, _, _ in latest], [r for r, _, _ in before], equal_var=False,
                                 alternative="greater").pvalue
            rose = raw[1] > raw[0] and (math.isnan(rise) or rise <= 1 - self.cfg.goodhart_confidence)
            fall = checked[0] - checked[1]
            pooled = (checked[0] * replies[0] + checked[1] * replies[1]) / sum(replies)
            spread = math.sqrt(pooled * (1 - pooled) * (1 / replies[0] + 1 / replies[1]) * dispersion)
            if rose and fall >= self.cfg.goodhart_drop and (spread == 0 or fall / spread >= threshold):
                return (f"the reward model's score rose ({raw[0]:.3f} -> {raw[1]:.3f}) while the independent check "
                        f"of the same replies fell ({checked[0]:.3f} -> {checked[1]:.3f}, {replies[0]:.0f} and "
                        f"{replies[1]:.0f} replies) {where}: the policy is exploiting the reward model "
                        "(Goodhart); raise beta, enable reward_settings.reward_model_length_debias, or retrain it")
        return None

    def on_log(self, args, state, control, logs=None, **kwargs):
        for kind, message in self.check(state.global_step, logs or {}):
            if self.cfg.action == "fail" or kind == "non_finite":
                raise TrainingAlert(message)
            if kind not in {a["kind"] for a in self.fired}:
                self.fired.append({"kind": kind, "step": state.global_step, "message": message})
                self.log(f"RL alert: {message}")
