"""Data sources: every format a user brings, columns mapped, sources mixed by weight, and bad data
stopped before any work with one line naming file, line or row, and column."""
import json
import re
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT
from posttrain.data.files import DatasetError
from conftest import overlaps
from posttrain.data.sources import SourceConfig, load_role

MATH_ROWS = [{"question": f"What is {i} plus 2?", "gold": str(i + 2)} for i in range(6)]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _math_source(path, **extra) -> SourceConfig:
    return SourceConfig(path=str(path), kind="math", columns={"question": "prompt", "gold": "answer"}, **extra)


def test_every_local_format_gives_the_same_normalised_rows(tmp_path):
    from datasets import Dataset

    _write(tmp_path / "m.jsonl", MATH_ROWS)
    (tmp_path / "m.json").write_text(json.dumps(MATH_ROWS))
    Dataset.from_list(MATH_ROWS).to_parquet(str(tmp_path / "m.parquet"))
    Dataset.from_list(MATH_ROWS).to_csv(str(tmp_path / "m.csv"), index=False)
    Dataset.from_list(MATH_ROWS).save_to_disk(str(tmp_path / "m_arrow"))
    loaded = {name: load_role("reasoning_prompts", [_math_source(tmp_path / name)], tmp_path, 0).rows
              for name in ("m.jsonl", "m.json", "m.parquet", "m.csv", "m_arrow")}
    first = loaded["m.jsonl"]
    assert first[0] == {"prompt": [{"role": "user", "content": "What is 0 plus 2?"}], "kind": "math",
                        "thinking": None, "language": "en", "answer": "2"}
    for name, rows in loaded.items():
        assert rows == first, name


def test_a_glob_pattern_reads_every_shard_in_order_and_hashes_them_all(tmp_path):
    from datasets import Dataset

    from posttrain.data.sources import source_hash

    shards = tmp_path / "data"
    shards.mkdir()
    for i, part in enumerate((MATH_ROWS[:4], MATH_ROWS[4:])):   # published as train-0000i-of-00002.parquet
        Dataset.from_list(part).to_parquet(str(shards / f"train-0000{i}-of-00002.parquet"))
    (shards / "test-00000-of-00001.parquet").write_bytes((shards / "train-00000-of-00002.parquet").read_bytes())
    source = _math_source("data/train-*.parquet")
    rows = load_role("reasoning_prompts", [source], tmp_path, 0).rows
    assert [r["answer"] for r in rows] == [r["gold"] for r in MATH_ROWS]
    before = source_hash(source, tmp_path)
    Dataset.from_list(MATH_ROWS[4:5]).to_parquet(str(shards / "train-00001-of-00002.parquet"))
    assert source_hash(source, tmp_path) != before   # a changed shard changes the source's hash
    with pytest.raises(DatasetError, match=r"data/valid-\*\.parquet: the pattern matches no file"):
        load_role("reasoning_prompts", [_math_source("data/valid-*.parquet")], tmp_path, 0)
    (shards / "train-00002-of-00002.parquet").symlink_to("/dev/zero")
    with pytest.raises(DatasetError, match="not a regular file"):
        load_role("reasoning_prompts", [source], tmp_path, 0)


def test_sft_rows_in_trl_forms_get_the_mode_of_their_role(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "hi"}]},
            {"prompt": "Say yo.", "completion": "yo"},
            {"prompt": [{"role": "user", "content": "说你好。"}], "completion": [{"role": "assistant", "content": "你好"}]}]
    out = load_role("non_reasoning", [SourceConfig(path=str(_write(tmp_path / "c.jsonl", rows)))], tmp_path, 0).rows
    assert [r["thinking"] for r in out] == [False, False, False]
    # a non-thinking reply keeps an empty think block, so its mode is visible in the reply
    assert out[0]["messages"][-1]["content"] == "<think>\n\n</think>\n\nhi"
    assert [r["language"] for r in out] == ["en", "en", "zh"]


def test_weights_are_shares_of_the_role_and_upsampling_is_said(tmp_path):
    big = _write(tmp_path / "big.jsonl", MATH_ROWS)
    small = _write(tmp_path / "small.jsonl", MATH_ROWS[:2])
    role = load_role("reasoning_prompts", [_math_source(big, weight=1.0), _math_source(small, weight=3.0)], tmp_path, 0)
    assert len(role.rows) == 8
    assert role.shares == {str(big): 0.25, str(small): 0.75}
    assert any("upsampled 3.00x" in note for note in role.notes)
    with pytest.raises(DatasetError, match="give every source a `weight`, or none"):
        load_role("reasoning_prompts", [_math_source(big, weight=1.0), _math_source(small)], tmp_path, 0)


def test_limit_and_shuffle_seed_pick_rows_reproducibly(tmp_path):
    path = _write(tmp_path / "m.jsonl", MATH_ROWS)
    a = load_role("reasoning_prompts", [_math_source(path, limit=3, shuffle_seed=1)], tmp_path, 0).rows
    b = load_role("reasoning_prompts", [_math_source(path, limit=3, shuffle_seed=1)], tmp_path, 0).rows
    plain = load_role("reasoning_prompts", [_math_source(path, limit=3)], tmp_path, 0).rows
    assert a == b and len(a) == 3 and a != plain and [r["answer"] for r in plain] == ["2", "3", "4"]


def test_training_questions_in_an_eval_suite_are_found_exact_and_normalised():
    train = {"reasoning_prompts": [{"prompt": [{"role": "user", "content": "What is 2 plus 2?"}]}]}
    assert overlaps(train, {"math": [{"prompt": [{"role": "user", "content": "what is 2 plus 2 /think"}]}]})
    assert not overlaps(train, {"math": [{"prompt": [{"role": "user", "content": "What is 2 plus 3?"}]}]})


def _project(tmp_path, role_source: dict, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    eval_rows = _write(tmp_path / "eval.jsonl", [{"prompt": "What is 100 plus 1?", "answer": "101", "kind": "math"}])
    config = {"data": {"reasoning_prompts": role_source,
                       "eval": [{"name": "math", "kind": "math", "sources": {"path": str(eval_rows)}}]}}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _check(config) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posttrain.cli", "data", "check", "--config", str(config)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


GOOD = '{"question": "What is 1 plus 2?", "gold": "3"}\n'
BAD_DATA = [
    ("missing file", {"path": "nowhere.jsonl", "kind": "math"}, {}, r"nowhere.jsonl: data source does not exist"),
    ("missing mapped column", {"path": "d.jsonl", "kind": "math", "columns": {"problem": "prompt"}},
     {"d.jsonl": GOOD}, r"d.jsonl:1: column 'problem' \(mapped by `columns:` to 'prompt'\) is missing"),
    ("unparsable gold answer", {"path": "d.jsonl", "kind": "math", "columns": {"question": "prompt", "gold": "answer"}},
     {"d.jsonl": GOOD + '{"question": "What is 5 plus 5?", "gold": "\\\\frac{1}{"}\n'},
     r"d.jsonl:2: column 'answer' \(the file's 'gold'\): cannot parse gold answer"),
    ("empty source", {"path": "d.jsonl", "kind": "math"}, {"d.jsonl": ""}, r"d.jsonl: data source of role 'reasoning_prompts' is empty"),
    ("malformed JSONL line", {"path": "d.jsonl", "kind": "math", "columns": {"question": "prompt", "gold": "answer"}},
     {"d.jsonl": GOOD + '{"question": "x", "gold": \n'}, r"d.jsonl:2:\d+: not valid JSON"),
    ("unknown constraint type", {"path": "d.jsonl", "kind": "instruction"},
     {"d.jsonl": '{"prompt": "Say hi.", "constraints": [{"type": "rhymes_with", "word": "sky"}]}\n'},
     r"d.jsonl:1: column 'constraints': .*rhymes_with"),
    ("row without a task kind", {"path": "d.jsonl", "columns": {"question": "prompt", "gold": "answer"}},
     {"d.jsonl": GOOD}, r"d.jsonl:1: the row has no `kind` column and its source no `kind:`"),
]


@pytest.mark.parametrize("case,source,files,message", BAD_DATA, ids=[c[0] for c in BAD_DATA])
def test_data_check_names_file_line_and_column_of_bad_data_in_one_line(tmp_path, case, source, files, message):
    done = _check(_project(tmp_path, {**source, "path": str(tmp_path / source["path"])}, files))
    assert done.returncode == 2, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(message, lines[0]), done.stderr


def test_data_check_prints_rows_kinds_languages_and_the_realised_shares(tmp_path):
    big = _write(tmp_path / "big.jsonl", MATH_ROWS)
    small = _write(tmp_path / "small.jsonl", MATH_ROWS[:2])
    config = _project(tmp_path, [{"path": str(big), "kind": "math", "weight": 1, "columns": {"question": "prompt", "gold": "answer"}},
                                 {"path": str(small), "kind": "math", "weight": 3, "columns": {"question": "prompt", "gold": "answer"}}], {})
    done = _check(config)
    assert done.returncode == 0, done.stderr
    assert re.search(r"reasoning_prompts\s+8\s+math 8\s+en 8", done.stdout)
    assert "share 75.0%" in done.stdout and "upsampled" in done.stdout
    assert "train/eval overlap: 0 rows" in done.stdout


def test_contamination_is_an_error_before_any_training(tmp_path):
    path = _write(tmp_path / "m.jsonl", [{"question": "What is 100 plus 1?", "gold": "101"}])
    done = _check(_project(tmp_path, {"path": str(path), "kind": "math",
                                      "columns": {"question": "prompt", "gold": "answer"}}, {}))
    assert done.returncode == 2 and "contaminates evaluation" in done.stderr



def test_an_eval_suite_source_without_a_kind_holds_rows_of_the_suites_kind(tmp_path):
    from posttrain.config.pipeline import EvalSuiteConfig

    path = tmp_path / "eval_math.jsonl"
    path.write_text('{"prompt": "What is 2 plus 2?", "answer": "4"}\n')
    suite = EvalSuiteConfig(name="math", kind="math", sources=[{"path": str(path)}])
    assert suite.sources[0].kind == "math"
    assert EvalSuiteConfig(name="mixed", kind="math", sources=[{"path": str(path), "kind": "direct"}]).sources[0].kind == "direct"


# ---------------------------------------------------------------- published datasets mis-read, refused

def _published(tmp_path, writer) -> str:
    import published_shapes

    return str(getattr(published_shapes, writer)(tmp_path / "data"))


MIS_READ = [
    # (case, fixture writer, role, source settings, the one line that says what to set)
    ("GSM8K answer without its extractor", "write_gsm8k", "reasoning_prompts",
     {"kind": "math", "columns": {"question": "prompt"}},
     r" row 0: column 'answer': '.*' looks like GSM8K's `#### N` .*set `answer_from: \{column: answer, extract: gsm8k\}`"),
    ("NuminaMath worked solution as the gold answer", "write_numina_cot", "reasoning_prompts",
     {"kind": "math", "columns": {"problem": "prompt", "solution": "answer"}},
     r" row 0: column 'answer' \(the file's 'solution'\): '.*' looks like a worked solution.*"
     r"set `answer_from: \{column: solution, extract: boxed\}`"),
    ("OpenR1 proof as the gold answer", "write_openr1", "reasoning_prompts",
     {"kind": "math", "columns": {"problem": "prompt"}},
     r" row 1: column 'answer': 'proof' is words, not a value the verifier can check.*`drop: \[unverifiable_answer\]`"),
    ("MATH level text as the difficulty", "write_competition_math", "reasoning_prompts",
     {"kind": "math", "columns": {"problem": "prompt", "level": "difficulty"},
      "answer_from": {"column": "solution", "extract": "boxed"}},
     r" row 0: column 'difficulty' \(the file's 'level'\) is 'Level 1', not an integer.*"
     r"`values: \{difficulty: \"Level \(\\\\d\+\)\"\}`"),
    ("NuminaMath CoT as thinking SFT", "write_numina_cot", "cold_start", {},
     r" row 0: column 'messages': a thinking-mode reply with no think block .*`reply: \{reasoning: "),
    ("OpenThoughts traces as thinking SFT", "write_open_thoughts", "cold_start", {},
     r" row 0: column 'conversations': a thinking-mode reply with no think block.*<\|begin_of_thought\|>.*"
     r"`reply: \{markers: open_thoughts\}`"),
    ("s1K attempt as thinking SFT", "write_s1k", "cold_start", {"columns": {"question": "prompt", "attempt": "completion"}},
     r" row 0: column 'completion' \(the file's 'attempt'\): a thinking-mode reply with no think block.*"
     r"'thinking_trajectories'"),
]


@pytest.mark.parametrize("case,writer,role,settings,message", MIS_READ, ids=[c[0] for c in MIS_READ])
def test_a_published_dataset_mis_read_is_refused_naming_row_column_and_the_setting(tmp_path, case, writer, role,
                                                                                     settings, message):
    source = SourceConfig(path=_published(tmp_path, writer), **settings)
    with pytest.raises(DatasetError) as refused:
        load_role(role, [source], tmp_path, 0)
    text = str(refused.value)
    assert "\n" not in text and re.search(message, text), text
    assert len(text) < 500, text   # the offending value cut short, never a whole trace


def test_a_columns_mapping_onto_a_name_the_row_has_is_refused(tmp_path):
    turn = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]
    path = _write(tmp_path / "pairs.jsonl", [{"messages": turn, "rejected": turn}])
    with pytest.raises(DatasetError, match=r"pairs.jsonl:1: `columns:` maps 'rejected' onto 'messages', which the "
                                           r"row already has"):
        load_role("non_reasoning", [SourceConfig(path=str(path), columns={"rejected": "messages"})], tmp_path, 0)
    with pytest.raises(ValueError, match="both onto 'prompt'"):
        SourceConfig(path=str(path), columns={"question": "prompt", "problem": "prompt"})


@pytest.mark.parametrize("gold", ["proof", "Proof", "proof omitted", "See solution", "None", "not applicable"])
def test_a_gold_answer_that_is_no_value_is_refused(tmp_path, gold):
    path = _write(tmp_path / "m.jsonl", [{"question": "Prove it.", "gold": gold}])
    with pytest.raises(DatasetError, match=r"m.jsonl:1: column 'answer' \(the file's 'gold'\): .* is words, not a value "
                                           r"the verifier can check"):
        load_role("reasoning_prompts", [_math_source(path)], tmp_path, 0)


@pytest.mark.parametrize("gold", ["\\text{Evelyn}", "A", "(C)", "x = 3", "\\frac{1}{2}", "2, 3", "\\emptyset"])
def test_gold_answers_that_are_values_or_typeset_words_are_kept(tmp_path, gold):
    path = _write(tmp_path / "m.jsonl", [{"question": "Which?", "gold": gold}])
    assert load_role("reasoning_prompts", [_math_source(path)], tmp_path, 0).rows[0]["answer"] == gold


def test_word_answers_are_kept_when_the_source_says_they_are_meant(tmp_path):
    path = _write(tmp_path / "m.jsonl", [{"question": "Is 7 prime?", "gold": "Yes"}])
    assert load_role("reasoning_prompts", [_math_source(path, word_answers=True)], tmp_path, 0).rows[0]["answer"] == "Yes"


def test_answer_extractors(tmp_path):
    rows = [{"q": "a", "s": "so \\boxed{\\frac{1}{\\sqrt{2}}} and then \\boxed{\\{1, 2\\}}.", "g": "x\n#### 1,234,567",
             "r": "Answer: 12 (or rather) Answer: 13"},
            {"q": "b", "s": "no box here", "g": "y\n#### -5", "r": "Answer: 7"}]
    path = _write(tmp_path / "x.jsonl", rows)

    def answers(extract, column, **extra):
        source = SourceConfig(path=str(path), kind="math", columns={"q": "prompt"}, drop=["no_answer"],
                              answer_from={"column": column, "extract": extract, **extra})
        role = load_role("reasoning_prompts", [source], tmp_path, 0)
        return [r["answer"] for r in role.rows], role.dropped

    assert answers("gsm8k", "g") == (["1234567", "-5"], {})
    assert answers("boxed", "s") == (["\\{1, 2\\}"], {"no_answer": 1})
    assert answers("regex", "r", pattern=r"Answer: (\d+)") == (["13", "7"], {})
    with pytest.raises(ValueError, match="one group"):
        SourceConfig(path=str(path), answer_from={"column": "r", "extract": "regex", "pattern": r"Answer: \d+"})
    only_boxed = SourceConfig(path=str(path), kind="math", columns={"q": "prompt"}, answer_from={"column": "s", "extract": "boxed"})
    with pytest.raises(DatasetError, match=r"x.jsonl:2: column 's' has no \\boxed\{\} for `answer_from` \(extract: boxed\); "
                                           r"or drop such rows with `drop: \[no_answer\]`"):
        load_role("reasoning_prompts", [only_boxed], tmp_path, 0)


def test_a_transform_for_the_other_kind_of_role_is_refused(tmp_path):
    path = _write(tmp_path / "m.jsonl", MATH_ROWS)
    with pytest.raises(DatasetError, match="`answer_from:` gives prompt rows their gold answer"):
        load_role("cold_start", [SourceConfig(path=str(path), answer_from={"column": "gold", "extract": "boxed"})], tmp_path, 0)
    with pytest.raises(DatasetError, match="`reply:` builds SFT replies"):
        load_role("reasoning_prompts", [_math_source(path, reply={"reasoning": "gold", "answer": "gold"})], tmp_path, 0)


def test_data_check_shows_the_transforms_and_the_rows_dropped(tmp_path):
    source = {"path": _published(tmp_path, "write_competition_math"), "kind": "math",
              "columns": {"problem": "prompt", "level": "difficulty"}, "values": {"difficulty": "Level (\\d+)"},
              "answer_from": {"column": "solution", "extract": "boxed"}, "drop": ["no_answer", "unmapped_value"]}
    done = _check(_project(tmp_path, source, {}))
    assert done.returncode == 0, done.stderr
    assert re.search(r"reasoning_prompts\s+3\s+math 3", done.stdout), done.stdout
    assert "dropped 2 of 5 rows (no_answer 1, unmapped_value 1)" in done.stdout
    assert '"answer_from": {"column": "solution", "extract": "boxed"}' in done.stdout


def test_a_worked_solution_the_math_parser_would_accept_is_still_refused_as_a_gold_answer(tmp_path):
    path = _write(tmp_path / "m.jsonl", [{"question": "What is 17 plus 22?", "gold": "We have \\boxed{39}. Thus the answer is 39."}])
    with pytest.raises(DatasetError, match=r"m.jsonl:1: column 'answer' \(the file's 'gold'\): .* looks like a worked "
                                           r"solution.*`answer_from: \{column: gold, extract: boxed\}`"):
        load_role("reasoning_prompts", [_math_source(path)], tmp_path, 0)


@pytest.mark.parametrize("level", ["Level 2", "hard", 2.5, True])
def test_a_difficulty_that_is_no_integer_is_refused_at_load(tmp_path, level):
    path = _write(tmp_path / "m.jsonl", [{"question": "What is 1 plus 1?", "gold": "2", "level": level}])
    source = SourceConfig(path=str(path), kind="math", columns={"question": "prompt", "gold": "answer", "level": "difficulty"})
    with pytest.raises(DatasetError, match=r"m.jsonl:1: column 'difficulty' \(the file's 'level'\) is .*, not an integer.*`values: \{difficulty: "):
        load_role("reasoning_prompts", [source], tmp_path, 0)
    path.write_text(json.dumps({"question": "What is 1 plus 1?", "gold": "2", "level": "3"}) + "\n")
    assert load_role("reasoning_prompts", [source], tmp_path, 0).rows[0]["difficulty"] == 3


def test_a_reasoning_column_joins_the_rows_own_reply_and_loses_its_own_think_tags(tmp_path):
    turns = [{"role": "user", "content": "What is 2 plus 3?"}, {"role": "assistant", "content": "It is 5."}]
    path = _write(tmp_path / "r1.jsonl", [{"messages": turns, "reasoning_content": "<think>\n2 and 3 make 5.\n</think>"}])
    (row,) = load_role("cold_start", [SourceConfig(path=str(path), reply={"reasoning": "reasoning_content"})], tmp_path, 0).rows
    assert row["messages"][-1]["content"] == "<think>\n2 and 3 make 5.\n</think>\n\nIt is 5."
