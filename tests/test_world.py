"""The embedded world: task generators, the chat format, the corpus and the tiny model build."""
import random

import pytest

from posttrain.chat import assemble_response, conversation, parse_response
from posttrain.world import tasks
from posttrain.world.corpus import CorpusConfig, build_corpus


def test_generators_are_deterministic():
    assert [p.to_row() for p in tasks.math_problems(50, 3, "train")] == \
        [p.to_row() for p in tasks.math_problems(50, 3, "train")]
    assert tasks.math_problems(20, 3, "train")[0].question != tasks.math_problems(20, 4, "train")[0].question


@pytest.mark.parametrize("op", ["+", "-", "*"])
def test_reasoning_steps_reach_the_right_answer(op):
    rng = random.Random(op)
    for _ in range(300):
        a, b = rng.randint(10, 999), rng.randint(2, 9) if op == "*" else rng.randint(10, 999)
        if op == "-" and a < b:
            a, b = b, a
        digits = []
        for en, _zh in tasks.reasoning_steps(op, a, b):
            digits.append(en.split("write ")[-1].split(" ")[0])
        assert int("".join(reversed(digits))) == tasks.compute(op, a, b), (op, a, b)


def test_held_out_suites_do_not_overlap_training():
    train = [p.question for p in tasks.math_problems(3000, 1, "train")]
    held_out = [p.question for p in tasks.math_problems(300, 2, "eval")]
    tasks.check_no_overlap(held_out, train)
    held_out_ops = {(p.a, p.op, p.b) for p in tasks.math_problems(300, 2, "eval")}
    assert not held_out_ops & {(p.a, p.op, p.b) for p in tasks.math_problems(3000, 1, "train")}


def test_eval_phrasings_are_never_training_phrasings():
    for key, (train_variants, eval_variants) in tasks.TEMPLATES.items():
        assert len(train_variants) >= 2, f"{key}: one training phrasing teaches number positions, not reading"
        shared = {tasks.normalise_prompt(t) for t in train_variants} & {tasks.normalise_prompt(t) for t in eval_variants}
        assert not shared, f"{key}: {shared}"


def test_overlap_check_fails_loudly_on_a_leak():
    train = ["What is 12 + 30?", "Compute 5 + 5."]
    with pytest.raises(tasks.OverlapError, match="1 held-out prompts"):
        tasks.check_no_overlap(["what is 12+30 ?", "Evaluate 1 + 1."], train)


def test_corpus_has_no_chat_format_but_mixes_languages():
    docs = build_corpus(CorpusConfig(math_documents=600, direct_documents=50), seed=0)
    text = "\n".join(docs)
    assert "<think>" not in text and "\\boxed" not in text and "<|im_start|>" not in text
    mixed = [d for d in docs if d.startswith("问题") and "write" in d]
    assert mixed, "some Chinese solutions must carry English steps"


def test_every_digit_and_cjk_character_is_one_token(tokenizer):
    for text in ["1234567890", "小明有37个苹果"]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == len(text)
        assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(tokenizer("37+48=85，写5", add_special_tokens=False)["input_ids"]) == "37+48=85，写5"


def test_think_tags_survive_decoding_without_specials(tokenizer):
    ids = tokenizer("<think>\nx\n</think>\n\ny<|im_end|>", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<think>\nx\n</think>\n\ny"


def test_chat_template_marks_only_the_reply_for_the_loss(tokenizer):
    messages = conversation("What is 1 + 2?", assemble_response("1+2=3", "\\boxed{3}"), thinking=True)
    out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    reply = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    assert reply == assemble_response("1+2=3", "\\boxed{3}") + "<|im_end|>"
    assert "/think" in tokenizer.decode(ids)


def test_parse_response_splits_reasoning_and_answer():
    parsed = parse_response(assemble_response("step", "The answer is \\boxed{3}."))
    assert parsed.reasoning == "step" and parsed.answer == "The answer is \\boxed{3}." and not parsed.empty_think
    assert parse_response(assemble_response("", "x")).empty_think
    assert parse_response("<think>still going").closed is False


def test_instruction_gold_responses_satisfy_their_constraints():
    import json

    from posttrain.rewards.instruction import instruction_score

    for split in ("train", "eval"):
        for t in tasks.instruction_tasks(90, 0, split):
            assert instruction_score(t.gold_response, t.constraints, reference=t.answer) == 1.0, (t.question, t.gold_response)
            json.dumps(t.to_row())


def test_eval_instruction_suite_covers_every_constraint_type():
    types = {t.constraints[0]["type"] for t in tasks.instruction_tasks(18, 0, "eval")}
    assert len(types) >= 8


def test_world_staleness_comes_from_dvc_status(tmp_path):
    """`ensure_world` reruns `dvc repro` when a dependency changed, not only when outputs are missing."""
    import os
    import subprocess
    import sys

    from posttrain.world.build import _dvc_stale_stages

    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    assert _dvc_stale_stages(tmp_path, env) == []  # not a DVC project: nothing to say, no error
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=tmp_path, check=True, env=env)
    (tmp_path / "generator.py").write_text("open('world.txt', 'w').write('v1')\n")
    (tmp_path / "dvc.yaml").write_text(
        f"stages:\n  world_data:\n    cmd: {sys.executable} generator.py\n    deps: [generator.py]\n    outs: [world.txt]\n")
    subprocess.run([sys.executable, "-m", "dvc", "repro", "-q"], cwd=tmp_path, check=True, env=env)
    assert _dvc_stale_stages(tmp_path, env) == []
    (tmp_path / "generator.py").write_text("open('world.txt', 'w').write('v2')\n")
    assert _dvc_stale_stages(tmp_path, env) == ["world_data"]


@pytest.mark.parametrize("op", ["+", "-", "*"])
def test_double_check_is_correct_arithmetic_and_still_grades_as_right(op):
    import re

    from posttrain.rewards import language_consistency
    from posttrain.rewards.format import format_ok
    from posttrain.rewards.math import verify_math
    from posttrain.world.reflection import with_check

    rng = random.Random(f"check{op}")
    for _ in range(100):
        a, b = rng.randint(10, 999), rng.randint(2, 9) if op == "*" else rng.randint(10, 999)
        if op == "-" and a < b:
            a, b = b, a
        answer = str(tasks.compute(op, a, b))
        for language in ("en", "zh"):
            plain = tasks.render_reasoning(op, a, b, language)
            checked = with_check(plain, op, a, b, language)
            check = checked[len(plain):]
            assert checked.startswith(plain) and check.endswith(answer), check
            equations = re.findall(r"(\d+(?:[-+×]\d+)+)=(\d+)", check)
            assert equations, check
            for lhs, rhs in equations:
                assert eval(lhs.replace("×", "*")) == int(rhs), (lhs, rhs, check)
            response = assemble_response(checked, tasks.default_math_answer(answer, language))
            assert verify_math(response, answer).reward == 1.0
            assert format_ok(response) and language_consistency([response], [language]) == [1.0]


def test_world_writes_every_role_as_standard_files_with_evaluation_held_out(tmp_path):
    """build_data's role files: each loads as its data role (gold answers parse), no training row
    asks an evaluation question, the worked solutions grade as right, and the cold-start rows carry
    the problem fields the bench's cold-start variants alter."""
    from conftest import write_smoke_config

    from posttrain.config.loading import load_config
    from posttrain.data.files import read_jsonl
    from posttrain.rewards import verify_row
    from posttrain.rewards.format import format_ok
    from conftest import overlaps
    from posttrain.data.sources import SourceConfig, load_role
    from posttrain.world.build import EVAL_FILES, FILE_ROLES, JUDGE_FILES, ROLE_FILES, WorldPaths, build_data

    cfg = load_config(write_smoke_config(tmp_path))
    manifest = build_data(cfg)
    paths = WorldPaths(cfg.path(cfg.paths.world))
    assert set(manifest) == set(ROLE_FILES + EVAL_FILES + JUDGE_FILES)
    raw = {name: read_jsonl(paths.file(name)) for name in manifest}
    assert {name: len(rows) for name, rows in raw.items()} == {name: m["rows"] for name, m in manifest.items()}
    judged = {name: {r["judged"]["question"] for r in raw[name]} for name in JUDGE_FILES}
    assert judged["judge_sft"] and judged["eval_judge"] and judged["judge_sft"].isdisjoint(judged["eval_judge"])
    manifest = {name: m for name, m in manifest.items() if name not in JUDGE_FILES}

    loaded = {name: load_role(FILE_ROLES[name] if name in ROLE_FILES else f"eval:{name}",
                              [SourceConfig(path=str(paths.file(name)))], tmp_path, 0).rows for name in manifest}
    train = {name: loaded[name] for name in ROLE_FILES}
    evals = {name: loaded[name] for name in EVAL_FILES}
    assert overlaps(train, evals) == []
    # The operands of training math are never the held-out ones.
    for name in ("cold_start", "non_reasoning_math"):
        assert raw[name] and not any(tasks.is_held_out(f"{r['a']}{r['op']}{r['b']}") for r in raw[name])
    assert {r["group"] for r in raw["eval_math"]} <= {f"L{level}{op}" for level in cfg.world.levels
                                                      for op, _, _ in tasks.LEVELS[level]}
    # Worked solutions (thinking) and bare answers (not thinking) grade as right, in their mode's format.
    for name, thinking in (("cold_start", True), ("non_reasoning_math", False)):
        for row in raw[name]:
            reply = row["messages"][-1]["content"]
            assert row["thinking"] is thinking and format_ok(reply, thinking), reply
            assert verify_row(reply, {"kind": "math", "answer": row["answer"]})[0] == 1.0, reply
    assert all(r["thinking"] for r in raw["reasoning_prompts"] + raw["rejection_prompts"] + raw["eval_math"])
    assert not any(r["thinking"] for r in raw["eval_no_think"] + raw["eval_direct"])
    no_think = sum(not r["thinking"] for r in raw["general_math_prompts"]) / len(raw["general_math_prompts"])
    assert no_think == pytest.approx(0.3, abs=0.05)


def test_held_out_problems_re_asked_with_training_phrasings():
    import re

    from posttrain.world.rephrase import problem_kind, with_training_phrasing

    def phrased_by(question: str, templates: list[str], row: dict) -> bool:
        def pattern(template: str) -> str:
            parts = re.split(r"(\{\w+\})", template)
            fill = {"{a}": str(row["a"]), "{b}": str(row["b"]), "{op}": tasks.OP_SYMBOL[row["op"]]}
            return "".join(re.escape(fill[p]) if p in fill else ".+?" if p.startswith("{") else re.escape(p)
                           for p in parts)
        return any(re.fullmatch(pattern(t), question) for t in templates)

    rows = [p.to_row() for p in tasks.math_problems(300, 2, "eval")]
    questions = with_training_phrasing(rows, seed=3)
    assert questions == with_training_phrasing(rows, seed=3)
    kinds = {problem_kind(r) for r in rows}
    assert kinds == {"bare", "word"}
    for row, question in zip(rows, questions):
        kind = problem_kind(row)
        train_variants, eval_variants = tasks.TEMPLATES[(row["language"], kind, "any" if kind == "bare" else row["op"])]
        assert phrased_by(row["question"], eval_variants, row), (kind, row["question"])
        assert phrased_by(question, train_variants, row), (kind, question)
    train = [p.question for p in tasks.math_problems(3000, 1, "train")]
    tasks.check_no_overlap(questions, train)   # the operands are still held out


def test_open_kind_pairs_differ_only_in_the_order_of_their_numbers():
    """The world's preference pairs: same length and same characters on both sides (so length and
    bag-of-tokens models score them at chance), the chosen reply passes evaluation's independent
    check and the rejected one fails it; half the demonstrations are right; training operands are
    never the held-out ones, and every character is already one of the tokenizer's."""
    from posttrain.rewards import verify_row
    from posttrain.world import open_tasks
    from posttrain.world.build import OPEN_POOL_SHARES, open_files, pool_share
    from posttrain.world.tokenizer import world_characters

    train = open_tasks.equation_tasks(400, 7, "train")
    held = open_tasks.equation_tasks(60, 8, "eval")
    assert not any(tasks.is_held_out(f"{t.a}+{t.b}") for t in train)
    assert all(tasks.is_held_out(f"{t.a}+{t.b}") for t in held)
    assert {t.question for t in train}.isdisjoint(t.question for t in held)
    files = open_files(train, 7)
    assert {name: len(rows) for name, rows in files.items() if name != "judge_sft"} == {
        name: len(pool_share(train, stage, OPEN_POOL_SHARES)) for name, stage in (
            ("open_demonstrations", "mode_fusion_sft"), ("preferences", "reward_model"),
            ("general_open_prompts", "general_rl"), ("distillation_open_prompts", "distillation"))}
    prompts = {t.question: open_tasks.prompt_row(t) for t in train}
    for pair in files["preferences"]:
        chosen, rejected = pair["chosen"][0]["content"], pair["rejected"][0]["content"]
        assert chosen != rejected and sorted(chosen) == sorted(rejected)
        row = prompts[pair["prompt"][0]["content"]]
        assert verify_row(chosen, row) == (1.0, "constraints_met")
        assert verify_row(rejected, row)[0] == 0.0
    right = [verify_row(r["messages"][-1]["content"], prompts[r["messages"][0]["content"]])[0]
             for r in files["open_demonstrations"]]
    assert 0.3 < sum(right) / len(right) < 0.7
    vocabulary = set(world_characters())
    texts = [t.question + t.reply(t.true_equation) for t in train + held]
    assert set("".join(texts)) <= vocabulary


def test_judge_rationale_compares_digit_by_digit_and_agrees_with_the_checker():
    """The world judge's target: each stated sum against the reference one digit pair at a time,
    and the rating the checker's verdict, which is `[[10]]` exactly when some sum is stated and
    every pair is equal (so the rating follows from the pairs the judge writes)."""
    import re

    from posttrain.world import open_tasks

    assert open_tasks.judge_rationale("981 + 15 = 997", "996") == "Stated: 997. Reference: 996. Digits: 9:9= 9:9= 7:6!."
    assert open_tasks.judge_rationale("99 + 1 = 100", "10").endswith("Digits: 1:1= 0:0= 0:_!.")
    rows = open_tasks.judge_rows(open_tasks.equation_tasks(300, 5, "train"), 5, training=True)
    for row in rows:
        target = row["messages"][-1]["content"]
        rationale, rating = re.fullmatch(r"<think>\n\n</think>\n\n(.*) \[\[(\d+)\]\]", target).groups()
        pairs = re.findall(r"(\S):(\S)([=!])", rationale.partition("Digits:")[2])
        assert all((op == "=") == (s == r) for s, r, op in pairs), target
        assert (rating == "10") == (bool(pairs) and all(op == "=" for _, _, op in pairs)), target
    assert {r["verdict"] for r in rows} == {0.0, 1.0}
