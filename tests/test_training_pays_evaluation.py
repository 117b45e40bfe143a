"""Training pays exactly what evaluation scores: each RL stage's rewards, built by the stage's own
builder and config on rows from `grpo_dataset`, agree with `score_suite` on every reply, for every
task kind and mode; the mode a prompt was rendered in is the mode its reply is judged in; a
truncated reply is wrong everywhere; a kind no weighted reward pays is refused; degenerate think
blocks earn no shaping reward; the live disagreement monitor fires."""
from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest

from posttrain.chat import ChatConfig, assemble_response, render_prompt, rendered_mode, to_canonical, user_turn
from posttrain.config.pipeline import EvalSuiteConfig
from posttrain.config.rl import RLAlertsConfig
from posttrain.config.loading import load_config
from posttrain.evaluation.suites import score_suite
from posttrain.generation.engines import Generation, _stop_ids
from posttrain.rewards import (TASKS, MissingTaskReward, RewardSettings, check_task_rewards, format_reward,
                               language_consistency, mode)
from posttrain.rewards.length import make_length_reward
from posttrain.rl.sampling import ProblemStats
from posttrain.rl.alerts import RLAlerts
from posttrain.rl.rewards import EvalDisagreement, stage_rewards
from posttrain.training.trainers import grpo_dataset, reward_settings, stop_token_ids

NUM_GENERATIONS = 4


def _model(tokenizer):
    return SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=tokenizer.eos_token_id))


def _rows(rng: random.Random) -> list[dict]:
    """Prompt rows of every kind, in every mode (thinking true / false / missing)."""
    rows = []
    for i in range(24):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        thinking = [True, False, None][i % 3]
        rows.append({"kind": "math", "prompt": [user_turn(f"Compute {a} + {b}.", None)], "answer": str(a + b),
                     "thinking": thinking, "language": "en"})
    for i, (q, ans) in enumerate([("What day follows Sunday?", "Monday"), ("Capital of France?", "Paris"),
                                  ("Write stone in capital letters.", "STONE")] * 3):
        rows.append({"kind": "direct", "prompt": [user_turn(q, None)], "answer": ans,
                     "thinking": [False, None, True][i % 3], "language": "en"})
    for i in range(9):
        a, b = rng.randint(10, 60), rng.randint(1, 9)
        constraints = [[{"type": "lowercase"}], [{"type": "json"}], [{"type": "max_words", "n": 6}]][i % 3]
        rows.append({"kind": "instruction", "prompt": [user_turn(f"Compute {a} - {b}.", None)],
                     "answer": str(a - b), "constraints": constraints, "thinking": [None, True, False][i % 3],
                     "language": "en"})
    for i in range(6):
        k = rng.randint(2, 9)
        tests = [{"call": f"f({x})", "expected": str(k * x), **({"hidden": True} if x > 2 else {})} for x in (1, 2, 3, 4)]
        rows.append({"kind": "code", "prompt": [user_turn(f"Write f(x) returning {k} * x. f(1) == {k}", None)],
                     "tests": tests, "thinking": [True, False, None][i % 3], "language": "en"})
    return rows


def _replies(row: dict, rng: random.Random) -> list[str]:
    """Candidate replies as a policy would try them: right, wrong, restated, hedged, in and out of mode."""
    think = "adding the tens then the ones, I get the sum"
    if row["kind"] == "math":
        a, _, rest = row["prompt"][0]["content"].removeprefix("Compute ").partition(" + ")
        b = rest.rstrip(".")
        gold = row["answer"]
        answers = [f"\\boxed{{{gold}}}", f"\\boxed{{{int(gold) + 1}}}", f"\\boxed{{{a} + {b}}}",
                   f"\\boxed{{{gold}}} or \\boxed{{{int(gold) - 1}}}", f"{gold}", "\\boxed{}"]
    elif row["kind"] == "direct":
        answers = [row["answer"], row["answer"].lower(), f"\\boxed{{{row['answer']}}}", "I do not know"]
    elif row["kind"] == "code":
        k = int(row["tests"][0]["expected"])
        fence = "```python\n{}\n```"
        answers = [fence.format(f"def f(x):\n    return {k} * x"), fence.format(f"def f(x):\n    return {k} + x"),
                   fence.format(f"def f(x):\n    return {{1: {k}, 2: {2 * k}}}[x]"), "f(x) = k x", fence.format("")]
    else:
        n = row["answer"]
        answers = [f"the answer is {n}", f'{{"answer": {n}}}', f'{{"answer": {int(n) + 3}}}', "ok", "OK",
                   f"The Answer Is {n}"]
    out = []
    for answer in answers:
        out += [assemble_response(think, answer), assemble_response("", answer), assemble_response("a", answer)]
    rng.shuffle(out)
    return out[:NUM_GENERATIONS]


def _trl_view(tokenizer, reply: str, prefill: str, truncate: bool):
    """What TRL hands a reward for one rollout: the generated part's token ids (ending in eos unless
    it hit the budget) and their decoded text."""
    generated = reply[len(prefill):] if prefill and reply.startswith(prefill) else reply
    ids = tokenizer(generated, add_special_tokens=False)["input_ids"]
    ids = ids[:max(1, len(ids) - 3)] if truncate else ids + [tokenizer.eos_token_id]
    return ids, tokenizer.decode(ids, skip_special_tokens=True)


def _suite_for(row: dict) -> EvalSuiteConfig:
    return EvalSuiteConfig(name=row["kind"], kind=row["kind"], mode="row", sources=[{"path": "unused.jsonl"}])


def _check_stage(stage_cfg, tokenizer, chat: ChatConfig, rows: list[dict], with_stats: bool) -> int:
    """Each rollout's task-reward component (the stage's own rewards) against score_suite's verdict."""
    rng = random.Random(1)
    model = _model(tokenizer)
    dataset = grpo_dataset(tokenizer, chat, rows)
    stats = ProblemStats([r["kind"] for r in rows]) if with_stats else None
    funcs, _ = stage_rewards(stage_cfg.rewards.model_dump(), reward_settings(stage_cfg, model, tokenizer), chat=chat,
                             tokenizer=tokenizer, model=model, stats=stats)
    task_rewards = [f for f in funcs if f.__name__ in {t.reward for t in TASKS.values()}]
    compared = 0
    for index, (row, example) in enumerate(zip(rows, dataset)):
        replies = _replies(row, rng)
        views = [_trl_view(tokenizer, r, example["prefill"], truncate=(j == NUM_GENERATIONS - 1 and index % 2 == 0))
                 for j, r in enumerate(replies)]
        columns = {k: [example[k]] * len(views) for k in example if k != "prompt"}
        columns["problem_index"] = [index] * len(views)
        paid = [f(completions=[text for _, text in views], prompts=[example["prompt"]] * len(views),
                  completion_ids=[ids for ids, _ in views], **columns) for f in task_rewards]
        component = [next(v for v in values if v is not None) for values in zip(*paid)]
        stop = _stop_ids(model, tokenizer)
        generations = [[Generation(text=to_canonical(example["prefill"] + text, chat), num_tokens=len(ids),
                                   truncated=ids[-1] not in stop, thinking=example["thinking"])] for ids, text in views]
        for gens, value in zip(generations, component):
            metrics, _ = score_suite(_suite_for(row), [row], [gens])
            assert value == metrics[f"{row['kind']}/accuracy"], (row, gens[0], value)
            compared += 1
    return compared


def test_each_rl_stage_pays_what_evaluation_scores_on_every_kind_and_mode(tokenizer):
    cfg = load_config("configs/default.yaml")
    rows = _rows(random.Random(0))
    every_kind = cfg.stages.reasoning_rl.rewards.model_copy(update={"instruction": 1.0, "code": 1.0})
    mixed_reasoning = cfg.stages.reasoning_rl.model_copy(update={"rewards": every_kind})
    compared = _check_stage(mixed_reasoning, tokenizer, ChatConfig(), rows, with_stats=True)
    with_code = cfg.stages.general_rl.rewards.model_copy(update={"code": 1.0})   # shipped weights, plus code rows paid
    compared += _check_stage(cfg.stages.general_rl.model_copy(update={"rewards": with_code}), tokenizer, ChatConfig(), rows,
                             with_stats=False)
    assert compared >= 300


def test_a_qwen3_template_without_a_thinking_column_is_judged_as_it_renders(tmp_path):
    """Qwen3's template thinks unless told otherwise: a prompt row without `thinking` is a thinking
    prompt, and its reply is judged so (a missing column is never read as "not thinking")."""
    from userdata import build_tokenizer

    tokenizer = build_tokenizer(tmp_path)
    chat = ChatConfig(thinking_switch="template_kwarg")
    rows = [{"kind": "math", "prompt": [{"role": "user", "content": "Compute 12 + 30."}], "answer": "42",
             "language": "en"}]
    dataset = grpo_dataset(tokenizer, chat, rows)
    assert dataset[0]["thinking"] is True
    reasoning = assemble_response("twelve and thirty make 42", "\\boxed{42}")
    empty = assemble_response("", "\\boxed{42}")
    assert format_reward([reasoning, empty], kind=["math"] * 2, thinking=[dataset[0]["thinking"]] * 2) == [1.0, 0.0]
    cfg = load_config("configs/default.yaml")
    assert _check_stage(cfg.stages.reasoning_rl, tokenizer, chat, rows * 8, with_stats=True) == 8 * NUM_GENERATIONS


@pytest.mark.parametrize("switch,expected", [
    ("suffix", {True: True, False: False, None: None}),
    ("template_kwarg", {True: True, False: False, None: True}),
    ("system_prompt", {True: True, False: False, None: True}),
    ("none", {True: None, False: None, None: None}),
])
def test_the_mode_is_the_one_the_prompt_was_rendered_in(tmp_path_factory, switch, expected):
    from userdata import build_tokenizer

    tokenizer = build_tokenizer(tmp_path_factory.mktemp("qwen3"))
    chat = ChatConfig(thinking_switch=switch, no_think_system_prompt="Answer without thinking.")
    turns = [{"role": "user", "content": "Compute 1 + 2."}]
    for thinking, mode_expected in expected.items():
        assert rendered_mode(tokenizer, chat, turns, thinking) == mode_expected, (switch, thinking)
        row = {"kind": "math", "prompt": turns, "answer": "3", "language": "en"}
        if thinking is not None:
            row["thinking"] = thinking
        if mode_expected is None and thinking is False:
            with pytest.raises(ValueError, match="cannot tell the model"):
                grpo_dataset(tokenizer, chat, [row])
            continue
        example = grpo_dataset(tokenizer, chat, [row])[0]
        assert example["thinking"] == mode_expected
        # the rendering is what the model sees: the mode read back from it is the judged mode
        assert render_prompt(tokenizer, chat, turns, thinking)[0] == example["prompt"]


def test_a_truncated_reply_is_wrong_in_every_reward_stack_and_in_the_sampler(tokenizer):
    cfg = load_config("configs/default.yaml")
    model, chat = _model(tokenizer), ChatConfig()
    rows = [{"kind": "math", "prompt": [user_turn("Compute 20 + 22.", True)], "answer": "42", "thinking": True,
             "language": "en"}]
    example = grpo_dataset(tokenizer, chat, rows)[0]
    reply = assemble_response("twenty and twenty-two make 42", "\\boxed{42}. And then some more words")
    whole, cut = _trl_view(tokenizer, reply, "", False), _trl_view(tokenizer, reply, "", True)
    assert "\\boxed{42}" in cut[1]
    for stage in (cfg.stages.reasoning_rl, cfg.stages.general_rl):
        stats = ProblemStats(["math"])
        funcs, _ = stage_rewards(stage.rewards.model_dump(), reward_settings(stage, model, tokenizer), chat=chat,
                                 tokenizer=tokenizer, model=model, stats=stats)
        (task,) = [f for f in funcs if f.__name__ == "correctness"]
        columns = {k: [example[k]] * 2 for k in example if k != "prompt"}
        logged = {}
        got = task(completions=[whole[1], cut[1]], completion_ids=[whole[0], cut[0]],
                   log_metric=logged.__setitem__, **columns)
        assert got == [1.0, 0.0]
        assert logged["verifier/truncated"] == 0.5 and stats.own[0] == 0.5
    length = make_length_reward(2, stop_ids=stop_token_ids(model, tokenizer))
    assert length([whole[1], cut[1]], completion_ids=[whole[0], cut[0]], task=[example["task"]] * 2,
                  kind=["math"] * 2, thinking=[True] * 2)[1] <= 0


def test_the_task_reward_is_logged_split_by_row_kind_for_the_report_card(tokenizer):
    """`correctness` pays math and direct rows: one batch of both logs what each kind was paid."""
    cfg = load_config("configs/default.yaml")
    model, chat, stage = _model(tokenizer), ChatConfig(), cfg.stages.general_rl
    rows = [{"kind": "math", "prompt": [user_turn("Compute 20 + 22.", True)], "answer": "42", "thinking": True},
            {"kind": "direct", "prompt": [user_turn("Capital of France?", False)], "answer": "Paris", "thinking": False}]
    examples = grpo_dataset(tokenizer, chat, rows)
    replies = [assemble_response("20 and 22 make 42", "\\boxed{42}"), assemble_response("20 and 22", "\\boxed{41}"),
               assemble_response("", "Paris"), assemble_response("", "Paris"), assemble_response("", "Lyon"),
               assemble_response("", "Paris")]
    owner = [0, 0, 1, 1, 1, 1]
    views = [_trl_view(tokenizer, r, examples[i]["prefill"], False) for r, i in zip(replies, owner)]
    stats = ProblemStats([r["kind"] for r in rows])
    funcs, _ = stage_rewards(stage.rewards.model_dump(), reward_settings(stage, model, tokenizer), chat=chat,
                             tokenizer=tokenizer, model=model, stats=stats)
    (task,) = [f for f in funcs if f.__name__ == "correctness"]
    columns = {k: [examples[i][k] for i in owner] for k in examples[0] if k != "prompt"}
    logged = {}
    got = task(completions=[t for _, t in views], completion_ids=[ids for ids, _ in views],
               log_metric=logged.__setitem__, **columns)
    assert got == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert logged["reward_by_kind/math"] == 0.5 and logged["reward_by_kind/direct"] == 0.75


def test_a_kind_no_weighted_reward_pays_is_refused_naming_the_weight():
    cfg = load_config("configs/default.yaml")
    with pytest.raises(MissingTaskReward, match=r"12 rows of kind 'code'.*set rewards\.code > 0"):
        check_task_rewards(cfg.stages.general_rl.rewards.model_dump(), {"math": 40, "code": 12}, "stages.general_rl")
    with pytest.raises(MissingTaskReward, match=r"kind 'instruction'.*rewards\.instruction"):
        check_task_rewards(cfg.stages.reasoning_rl.rewards.model_dump(), {"instruction": 3}, "stages.reasoning_rl")
    check_task_rewards(cfg.stages.general_rl.rewards.model_dump(), {"math": 1, "instruction": 1, "direct": 1}, "ok")


def test_a_mixed_reasoning_prompts_file_without_its_weight_is_refused_before_any_work(tmp_path):
    from posttrain.data.files import DatasetError
    from posttrain.data.prepared import load_all

    rows = [{"prompt": "Compute 1 + 2.", "kind": "math", "answer": "3"},
            {"prompt": "Say hi in lowercase.", "kind": "instruction", "constraints": [{"type": "lowercase"}]}]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "eval.jsonl").write_text(json.dumps({"prompt": "Compute 5 + 5.", "answer": "10"}) + "\n")
    (tmp_path / "c.yaml").write_text(
        "data:\n  reasoning_prompts: [{path: prompts.jsonl}]\n"
        "  eval: [{name: math, kind: math, sources: [{path: eval.jsonl, kind: math}]}]\n")
    cfg = load_config(tmp_path / "c.yaml")
    with pytest.raises(DatasetError, match=r"stages\.reasoning_rl.*kind 'instruction'.*rewards\.instruction > 0"):
        load_all(cfg, ("reasoning_rl",))


@pytest.mark.parametrize("reasoning", ["a", "ok ok ok ok", "\u200b\u200b", "7", "....", "x x"])
def test_a_degenerate_think_block_earns_no_shaping_reward(reasoning):
    reply = assemble_response(reasoning, "\\boxed{42}")
    honest = assemble_response("forty plus two makes 42", "\\boxed{42}")
    assert format_reward([reply, honest], kind=["math"] * 2, thinking=[True] * 2) == [0.0, 1.0]
    assert mode([reply, honest], thinking=[True] * 2) == [0.0, 1.0]
    assert language_consistency([reply], ["en"])[0] in (0.0, None)
    length = make_length_reward(2)
    got = length([reply, honest], answer=["42"] * 2, kind=["math"] * 2, thinking=[True] * 2)
    assert got[0] <= 0   # no bonus for being short with nothing in the think block


def test_the_eval_disagreement_monitor_logs_and_alerts(tokenizer):
    chat, model = ChatConfig(), _model(tokenizer)
    rows = [{"kind": "math", "prompt": [user_turn("Compute 20 + 22.", True)], "answer": "42", "thinking": True,
             "language": "en"}]
    example = grpo_dataset(tokenizer, chat, rows)[0]
    monitor = EvalDisagreement(tokenizer, chat, _stop_ids(model, tokenizer))
    ids, text = _trl_view(tokenizer, assemble_response("twenty plus twenty-two is 42", "\\boxed{42}"), "", False)
    assert monitor.rate([1.0], [example["task"]], [ids], [""]) == 0.0
    # a reward that pays a reply evaluation scores 0 (or the reverse) is caught
    assert monitor.rate([0.0], [example["task"]], [ids], [""]) == 1.0
    fired = []
    alerts = RLAlerts(RLAlertsConfig(), log=fired.append)
    assert [k for k, _ in alerts.check(3, {EvalDisagreement.KEY: 0.25})] == ["eval_disagreement"]
    assert alerts.check(3, {EvalDisagreement.KEY: 0.0}) == []
    settings = RewardSettings(stop_ids=stop_token_ids(model, tokenizer))
    funcs, _ = stage_rewards({"correctness": 1.0}, settings, chat=chat, tokenizer=tokenizer, model=model)
    logged = {}
    funcs[0](completions=[text], completion_ids=[ids], log_metric=logged.__setitem__,
             **{k: [example[k]] for k in example if k != "prompt"})
    assert logged[EvalDisagreement.KEY] == 0.0
