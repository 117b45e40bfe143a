"""The reward model: trained on preference pairs with TRL's RewardTrainer by the reward_model stage,
scored as general RL's `reward_model` reward on open-ended rows with the same rendering, normalised
per group, and watched for Goodhart (its score rising while the independent check falls)."""
import json
import random
from pathlib import Path

import pytest

from posttrain.config.rl import RLAlertsConfig
from posttrain.config.pipeline import RewardModelConfig
from posttrain.rewards.model_based import CHECKED, CHECKED_REPLIES, RAW_SCORE, normalise_groups

pytestmark = pytest.mark.timeout(600)
WORDS = ["cat", "dog", "sun", "tree", "book", "lamp", "rain", "star", "fish", "bird", "door", "moon"]


def _pairs(n: int, seed: int) -> list[dict]:
    """Conversational pairs whose chosen reply starts with "good", the rejected one with "bad!"
    (same length): a property a tiny reward model learns in a few steps."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        word = f"{rng.choice(WORDS)} {rng.choice(WORDS)} {i}"
        rows.append({"prompt": [{"role": "user", "content": f"Describe {word}."}],
                     "chosen": [{"role": "assistant", "content": f"good {word}"}],
                     "rejected": [{"role": "assistant", "content": f"bad! {word}"}],
                     "score_chosen": 8.0, "score_rejected": 3.0, "language": "en"})
    return rows


@pytest.fixture(scope="module")
def init_model(tokenizer, tmp_path_factory):
    """A tiny causal LM directory (the reward model starts from it, as from base.student)."""
    from posttrain.schema import CheckpointRef
    from posttrain.world.model import Architecture, build_model

    out = tmp_path_factory.mktemp("init")
    model = build_model(Architecture(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                     intermediate_size=64), tokenizer, seed=0)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return CheckpointRef(path=str(out), digest="init")


@pytest.fixture(scope="module")
def trained(init_model, tmp_path_factory):
    """The reward_model stage run on 160 pairs: (result, held-out pairs, config)."""
    from posttrain.data.files import dataset_ref, write_jsonl
    from posttrain.rewards.reward_model import split_pairs
    from posttrain.schema import StageInputs
    from stages import reward_model

    work = tmp_path_factory.mktemp("rm")
    rows = _pairs(160, 0)
    write_jsonl(rows, work / "preferences.jsonl")
    config = RewardModelConfig(held_out=0.2, trainer={"learning_rate": 3e-3, "epochs": 3, "batch_size": 16,
                                                      "threads": 2, "max_length": 64})
    inputs = StageInputs(work_dir=str(work / "stage"), parent=init_model, reward_model=init_model, seed=0,
                         data={"preferences": dataset_ref(work / "preferences.jsonl", name="preferences")})
    result = reward_model.run(config, inputs)
    return result, split_pairs(rows, config.held_out, 0)[1], config


def test_the_stage_trains_with_reward_trainer_and_measures_held_out_pairs(trained, init_model):
    result, held, _ = trained
    metrics = result.train_metrics
    assert result.checkpoint == init_model and result.reward_model is not None   # the policy passes through
    assert 20 <= metrics["held_out_pairs"] == len(held) < 60 and metrics["training_pairs"] == 160 - len(held)
    assert metrics["pairwise_accuracy"] >= 0.9 and metrics["mean_margin"] > 0
    assert "length_correlation" in metrics and "loss" in metrics


def test_a_pair_scored_through_the_grpo_path_equals_its_reward_trainer_score(trained, tokenizer):
    """The same token ids as RewardTrainer's tokenisation, and the same score from the GRPO reward
    (raw, before per-group normalisation) as from the trained head on RewardTrainer's own batch."""
    import torch
    from trl import RewardConfig, RewardTrainer
    from datasets import Dataset

    from posttrain.rewards.reward_model import RewardModelScorer, render, side
    from posttrain.rewards.model_based import make_reward_model_reward
    from posttrain.rewards import RewardSettings

    result, held, _ = trained
    scorer = RewardModelScorer(result.reward_model.path, batch_size=4)
    pair = held[0]
    ours = render(scorer.tokenizer, side(pair, "chosen"))
    reference = RewardTrainer(model=scorer.model, args=RewardConfig(output_dir="/tmp/unused-rm", report_to="none",
                                                                    use_cpu=True),
                              train_dataset=Dataset.from_list([{k: pair[k] for k in ("prompt", "chosen", "rejected")}]),
                              processing_class=scorer.tokenizer)
    theirs = reference.train_dataset[0]["chosen_ids"]
    assert ours == list(theirs)
    batch = reference.data_collator([reference.train_dataset[0]])
    with torch.no_grad():
        head = scorer.model(input_ids=batch["input_ids"][:1], attention_mask=batch["attention_mask"][:1]).logits[0, 0].item()
    logged = {}
    reward = make_reward_model_reward(RewardSettings(reward_model=scorer))
    task = [json.dumps({"kind": "open", "prompt": pair["prompt"]})] * 2
    reward([pair["chosen"], pair["rejected"]], task=task, log_metric=logged.__setitem__)
    raw_pair = scorer.scores([side(pair, "chosen"), side(pair, "rejected")])
    assert raw_pair[0] == pytest.approx(head, abs=1e-5)
    assert logged[RAW_SCORE] == pytest.approx(sum(raw_pair) / 2, abs=1e-5)


def test_as_the_only_reward_it_varies_within_groups_and_orders_them_by_score(trained):
    """What GRPO turns into advantages: per group, z-scores in the order of the model's scores;
    rows of other kinds get None (their own rules pay them)."""
    from posttrain.rewards.reward_model import RewardModelScorer
    from posttrain.rewards import RewardSettings
    from posttrain.rewards.model_based import make_reward_model_reward

    result, held, _ = trained
    scorer = RewardModelScorer(result.reward_model.path)
    reward = make_reward_model_reward(RewardSettings(reward_model=scorer, num_generations=4))
    completions, task = [], []
    for pair in held[:3]:
        word = pair["chosen"][0]["content"].removeprefix("good ")
        for reply in (f"good {word}", f"bad! {word}", f"good {word} {word}", f"meh. {word}"):
            completions.append([{"role": "assistant", "content": reply}])
            task.append(json.dumps({"kind": "open", "prompt": pair["prompt"]}))
    completions.append([{"role": "assistant", "content": "4"}])
    task.append(json.dumps({"kind": "math", "answer": "4", "prompt": "2+2"}))
    values = reward(completions, task=task)
    raw = scorer.scores([json.loads(t)["prompt"] + c for t, c in zip(task[:-1], completions[:-1])])
    assert values[-1] is None
    for g in range(3):
        group, scores = values[4 * g:4 * g + 4], raw[4 * g:4 * g + 4]
        assert max(group) - min(group) > 1.0                           # varies: an advantage to learn from
        assert sorted(range(4), key=group.__getitem__) == sorted(range(4), key=scores.__getitem__)
        assert sum(group) == pytest.approx(0, abs=1e-6)
        assert group[0] > group[1]                                      # "good" above "bad!"


def test_group_normalisation_truncation_and_length_debias():
    groups = ["a"] * 4 + ["b"] * 3
    finished = [True, True, True, False, True, True, True]
    scores = [1.0, 2.0, 3.0, 100.0, 5.0, 5.0, 5.0]
    out = normalise_groups(scores, groups, finished, [1] * 7)
    assert out[:3] == pytest.approx([-1.2247, 0.0, 1.2247], abs=1e-4)
    assert out[3] == min(out[:3])                  # cut off at the budget: never above a finished reply
    assert out[4:] == [0.0, 0.0, 0.0]              # no spread, no signal
    # Scores that only follow length: nothing left once the line in length is removed.
    lengths = [10, 20, 30, 40]
    biased = [0.5 * n + 1 for n in lengths]
    assert normalise_groups(biased, ["g"] * 4, [True] * 4, lengths, length_debias=True) == pytest.approx([0.0] * 4, abs=1e-6)
    assert normalise_groups(biased, ["g"] * 4, [True] * 4, lengths)[3] > 1.0


def test_goodhart_alert_fires_when_the_score_rises_while_the_check_falls():
    from posttrain.rl.alerts import RLAlerts

    alerts = RLAlerts(RLAlertsConfig(goodhart_window=6, goodhart_drop=0.05), log=lambda _: None)
    fired = [alerts.check(step, {RAW_SCORE: 0.1 * step, CHECKED: 0.6 - 0.03 * step, CHECKED_REPLIES: 100})
             for step in range(6)]
    assert not any(fired[:5]) and [kind for kind, _ in fired[5]] == ["goodhart"]
    honest = RLAlerts(RLAlertsConfig(goodhart_window=6), log=lambda _: None)
    assert not any(honest.check(step, {RAW_SCORE: 0.1 * step, CHECKED: 0.3 + 0.03 * step, CHECKED_REPLIES: 100})
                   for step in range(12))


def test_goodhart_alert_is_quiet_on_a_fall_the_few_replies_checked_explain():
    """0.41 -> 0.32 over 10 steps of 16 checked replies is noise (z 1.2, as a real general RL run on the
    world logged while its held-out check rose 0.18 -> 0.49); the same fall over 400 replies a step is not."""
    from posttrain.rl.alerts import RLAlerts

    checks = [0.45, 0.40, 0.38, 0.42, 0.40, 0.30, 0.35, 0.31, 0.33, 0.31]

    def fired(replies: int) -> list:
        alerts = RLAlerts(RLAlertsConfig(goodhart_window=10, goodhart_drop=0.05), log=lambda _: None)
        return [kind for step, c in enumerate(checks)
                for kind, _ in alerts.check(step, {RAW_SCORE: 0.2 * step, CHECKED: c, CHECKED_REPLIES: replies})]

    assert fired(16) == []
    assert fired(400) == ["goodhart"]


def _goodhart_bench():
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))   # as the script runs
    import goodhart_false_alarms

    return goodhart_false_alarms


def test_goodhart_alert_is_quiet_on_make_runs_own_general_rl():
    """Run ec6e8037's logged steps (its held-out open check rose 0.26 -> 0.56): a window tested at 95%
    at every step fired at logged step 31; the run's confidence shared out over its tests does not."""
    bench = _goodhart_bench()
    alerts = bench.alerts_for(bench.DEFAULT_RUN_STEPS, corrected=True)
    assert alerts.goodhart_tests == bench.DEFAULT_RUN_STEPS - RLAlertsConfig().goodhart_window + 1
    assert bench.first_alert(alerts, bench.DEFAULT_RUN) is None


@pytest.mark.parametrize("logging_steps, tests", [(1, 31), (2, 11), (0.25, 1)])
def test_goodhart_alert_counts_the_tests_a_run_makes_from_the_trainers_own_state(tmp_path, logging_steps, tests):
    """The Trainer computes the state's absolute logging interval (a fraction is of max_steps) before
    on_train_begin; 40 steps logged every step make 31 window positions of 10."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from posttrain.rl.alerts import RLAlerts

    args = TrainingArguments(output_dir=str(tmp_path), logging_steps=logging_steps, max_steps=40, report_to="none")
    state = TrainerState(max_steps=40)
    state.compute_steps(args, 40)
    alerts = RLAlerts(RLAlertsConfig(goodhart_window=10), log=lambda _: None)
    alerts.on_train_begin(args, state, TrainerControl())
    assert alerts.goodhart_tests == tests


def test_goodhart_alert_false_alarms_stay_at_the_runs_confidence_and_a_slow_slide_is_caught():
    """Simulated 40-step runs (bench/goodhart_false_alarms.py, prompts' Beta a + b = 20: the dispersion
    make run's general RL shows): with the check's true rate flat and the score rising, at most one
    run in 20 alerts (each test at 95%: about half); with the check sliding 0.3 -> 0.05, which no
    window of 10 steps shows as significant, at least 40% of runs alert, against the run's start."""
    bench = _goodhart_bench()
    counts = [n for _, _, n in bench.DEFAULT_RUN]
    rng = random.Random(0)

    def share(rate_at) -> float:
        return sum(bench.first_alert(bench.alerts_for(40, corrected=True),
                                     bench.simulated_run(rng, 40, rate_at, counts, concentration=20)) is not None
                   for _ in range(150)) / 150

    assert share(lambda _: 0.3) <= 0.05
    assert share(lambda t: 0.3 - 0.25 * t) >= 0.4


def test_goodhart_alert_fires_on_the_length_biased_reward_models_run():
    """bench/goodhart_alert.py's real GRPO run (32 logged steps of 64 replies) on a reward model that
    pays long, wrong replies: its score rises -4.5 -> +3.8 while the check falls 0.20 -> 0; the alert
    fires at step 9 in the replay and fired in the run itself."""
    bench = _goodhart_bench()
    recorded = json.loads((Path(__file__).parents[1] / "bench/results/goodhart_alert.json").read_text())
    arm = recorded["arms"]["length_biased"]
    logged = [(s["raw_score"], s["independent_check"], 64) for s in arm["steps"]]
    alerts = bench.alerts_for(len(logged), corrected=True, cfg=RLAlertsConfig(goodhart_window=8, goodhart_drop=0.05))
    assert bench.first_alert(alerts, logged) == 9
    assert arm["goodhart_fired"] and "to step 9:" in arm["alerts"][0]


def test_a_weighted_reward_model_without_one_is_refused_naming_the_field(tmp_path):
    from conftest import config_error

    message = config_error(tmp_path, "stages:\n  general_rl:\n    rewards: {instruction: 1.0, reward_model: 0.5}\n")
    assert "stages.general_rl.rewards.reward_model is 0.5" in message and "data.preferences" in message


def test_without_a_reward_model_configured_the_stage_is_skipped_and_general_rl_scores_no_open_rows():
    from posttrain.config.pipeline import STAGE_BY_NAME, PipelineConfig

    cfg = PipelineConfig()
    assert STAGE_BY_NAME["reward_model"].skipped_unless(cfg)
    brought = PipelineConfig(stages={"reward_model": {"bring": "some/rm", "gate": {"targets": []}}})
    assert STAGE_BY_NAME["reward_model"].skipped_unless(brought) is None


def test_a_brought_reward_model_gated_on_pairs_it_has_none_of_is_refused(tmp_path):
    from conftest import config_error

    message = config_error(tmp_path, "stages:\n  reward_model:\n    bring: some/rm\n")
    assert "stages.reward_model.gate reads stage.pairwise_accuracy" in message and "data.preferences" in message


def test_the_reward_model_stage_runs_in_one_process(tmp_path):
    from conftest import config_error

    message = config_error(tmp_path, "stages:\n  reward_model:\n    launcher: {kind: torchrun, num_processes: 2}\n")
    assert "reward_model saves its reward model from this process only" in message


def test_evaluation_reports_the_reward_models_score_of_open_suites_as_training_pays_it(trained, init_model, tmp_path):
    """After the reward model stage, an open-ended suite also reports `<suite>/reward_model`: the raw
    score training's reward gives the same reply (one rendering, model_based.conversation_scores);
    without a reward model there is no such metric, and a gate cannot name it (it is descriptive)."""
    from posttrain.config.pipeline import ConfigError
    from posttrain.config.loading import load_config
    from posttrain.data.files import write_jsonl
    from posttrain.evaluation.suites import evaluate
    from posttrain.rewards.reward_model import RewardModelScorer
    from posttrain.rewards import RewardSettings
    from posttrain.rewards.model_based import make_reward_model_reward

    result, held, _ = trained
    question = held[0]["prompt"][-1]["content"]
    write_jsonl([{"prompt": question, "kind": "open", "constraints": [{"type": "lowercase"}]}], tmp_path / "open.jsonl")
    config = (f"name: t\nbase: {{model: {init_model.path}}}\nevaluation: {{max_new_tokens: 12}}\n"
              "data:\n  eval:\n    - {name: chat, kind: open, mode: row, sources: {path: open.jsonl}}\n")
    (tmp_path / "c.yaml").write_text(config)
    cfg = load_config(tmp_path / "c.yaml")
    scored = evaluate(init_model, cfg, reward_model=result.reward_model.path)
    assert "chat/reward_model" not in evaluate(init_model, cfg).metrics
    logged = {}
    reward = make_reward_model_reward(RewardSettings(reward_model=RewardModelScorer(result.reward_model.path)))
    reward([scored.samples[0]["response"]], task=[json.dumps({"kind": "open", "prompt": [
        {"role": "user", "content": question}]})], log_metric=logged.__setitem__)
    assert scored.metrics["chat/reward_model"] == pytest.approx(logged[RAW_SCORE], abs=1e-6)
    (tmp_path / "g.yaml").write_text(config + "stages:\n  general_rl:\n    gate: {targets: [{metric: chat/reward_model, "
                                     "above: mode_fusion_sft}]}\n")
    with pytest.raises(ConfigError, match="chat/reward_model"):
        load_config(tmp_path / "g.yaml")
