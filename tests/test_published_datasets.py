"""The datasets everybody post-trains on, as they are published (tests/published_shapes.py), go in
through the config alone: each test writes the YAML a user writes, loads it the way `posttrain data
check` does (prepared.load_all), and checks the rows: gold answers a known-correct reply verifies
and a wrong one does not (`verify_row`), SFT replies with their think block, dropped rows counted."""
import ast
import json

import pytest

import published_shapes as shapes
from posttrain.chat import assemble_response, parse_response
from posttrain.data.files import DatasetError
from posttrain.rewards import verify_row


def _load(tmp_path, yaml_text: str) -> dict:
    from posttrain.config.loading import load_config
    from posttrain.data.prepared import load_all

    path = tmp_path / "config.yaml"
    path.write_text(yaml_text)
    return load_all(load_config(path, project_root=tmp_path), require=False)


def _reply(answer: str) -> str:
    return f"<think>\nWorking it out.\n</think>\n\nThe answer is $\\boxed{{{answer}}}$."


def _verifies(row: dict, gold: str, wrong: str) -> None:
    assert verify_row(_reply(gold), row) == (1.0, "match"), (row["answer"], gold)
    assert verify_row(_reply(wrong), row)[0] == 0.0, (row["answer"], wrong)


def _thinks(row: dict) -> str:
    """The reasoning of an SFT row's final reply, asserting the think-mode shape."""
    parsed = parse_response(row["messages"][-1]["content"])
    assert row["thinking"] is True and parsed.think_blocks == 1 and parsed.closes == 1 and parsed.reasoning
    return parsed.reasoning


def test_gsm8k_answers_come_from_their_hash_line(tmp_path):
    shapes.write_gsm8k(tmp_path / "data")
    loaded = _load(tmp_path, """
data:
  reasoning_prompts:
    - {path: data/gsm8k/main/train-00000-of-00001.parquet, kind: math, columns: {question: prompt},
       answer_from: {column: answer, extract: gsm8k}}
""")
    rows = loaded["reasoning_prompts"].rows
    assert [r["answer"] for r in rows] == shapes.GSM8K_GOLD   # "#### 1,234" -> 1234, "#### -5" -> -5
    for row, gold in zip(rows, shapes.GSM8K_GOLD):
        _verifies(row, gold, str(int(gold) + 1))
    assert rows[0]["prompt"][0]["content"].startswith("Natalia sold clips")


def test_math500_eval_suite_keeps_its_answers_and_integer_levels(tmp_path):
    shapes.write_math500(tmp_path / "data")
    loaded = _load(tmp_path, """
data:
  eval:
    - name: math500
      kind: math
      sources: {path: data/MATH-500/test.jsonl, columns: {problem: prompt, level: difficulty}}
""")
    rows = loaded["eval:math500"].rows
    assert [r["answer"] for r in rows] == shapes.MATH500_GOLD
    assert [r["difficulty"] for r in rows] == [2, 1, 2]
    for row, gold, wrong in zip(rows, shapes.MATH500_GOLD, ["(3, \\pi)", "\\frac{1}{3}", "\\text{Briana}"]):
        _verifies(row, gold, wrong)


def test_competition_math_levels_and_boxed_answers_with_unusable_rows_dropped_and_counted(tmp_path):
    shapes.write_competition_math(tmp_path / "data")
    loaded = _load(tmp_path, r"""
data:
  reasoning_prompts:
    - path: data/competition_math/train.parquet
      kind: math
      columns: {problem: prompt, level: difficulty}
      values: {difficulty: "Level (\\d+)"}
      answer_from: {column: solution, extract: boxed}
      drop: [no_answer, unmapped_value]
""")
    role = loaded["reasoning_prompts"]
    # nested braces kept whole; of two boxes, the last one
    assert [r["answer"] for r in role.rows] == shapes.COMPETITION_MATH_GOLD
    assert [r["difficulty"] for r in role.rows] == [1, 2, 3]
    assert role.dropped == {"no_answer": 1, "unmapped_value": 1}
    assert any("dropped 2 of 5 rows" in note for note in role.notes)
    for row, gold, wrong in zip(role.rows, shapes.COMPETITION_MATH_GOLD, ["\\frac{1}{3}", "2", "72"]):
        _verifies(row, gold, wrong)


def test_numina_cot_gives_boxed_gold_answers_and_thinking_sft_rows(tmp_path):
    path = shapes.write_numina_cot(tmp_path / "data").relative_to(tmp_path)
    loaded = _load(tmp_path, f"""
data:
  reasoning_prompts:
    - {{path: {path}, kind: math, columns: {{problem: prompt}}, answer_from: {{column: solution, extract: boxed}},
       drop: [no_answer]}}
  cold_start:
    - path: {path}
      reply: {{reasoning: solution, answer: {{column: solution, extract: boxed}}}}
      drop: [no_answer]
""")
    prompts, sft = loaded["reasoning_prompts"], loaded["cold_start"]
    assert [r["answer"] for r in prompts.rows] == shapes.NUMINA_GOLD
    _verifies(prompts.rows[0], "39", "40")
    _verifies(prompts.rows[1], "\\frac{1}{2}", "\\frac{1}{4}")
    assert prompts.dropped == sft.dropped == {"no_answer": 1}     # the proof has no box
    first = shapes.NUMINA_COT[0]
    assert sft.rows[0]["messages"] == [{"role": "user", "content": first["problem"]},
                                       {"role": "assistant", "content": assemble_response(first["solution"], "\\boxed{39}")}]
    assert all(_thinks(r) for r in sft.rows)


def test_openr1_math_drops_proofs_and_keeps_its_r1_traces(tmp_path):
    path = shapes.write_openr1(tmp_path / "data").relative_to(tmp_path)
    loaded = _load(tmp_path, f"""
data:
  reasoning_prompts:
    - {{path: {path}, kind: math, columns: {{problem: prompt}}, drop: [unverifiable_answer]}}
  cold_start: {{path: {path}}}
""")
    prompts = loaded["reasoning_prompts"]
    assert [r["answer"] for r in prompts.rows] == list(shapes.OPENR1_GOLD.values())
    assert prompts.dropped == {"unverifiable_answer": 4}   # proof, Proof, proof omitted, See solution
    _verifies(prompts.rows[0], "14", "12")
    _verifies(prompts.rows[1], "\\frac{3}{4}", "\\frac{1}{4}")
    assert all(verify_row(_reply("proof"), r)[0] == 0.0 for r in prompts.rows)
    sft = loaded["cold_start"].rows
    assert len(sft) == len(shapes.OPENR1) and all(_thinks(r) for r in sft)


def test_open_thoughts_markers_become_the_think_block_and_a_cut_trace_is_dropped(tmp_path):
    default = shapes.write_open_thoughts(tmp_path / "data").relative_to(tmp_path)
    metadata = shapes.write_open_thoughts_metadata(tmp_path / "data").relative_to(tmp_path)
    loaded = _load(tmp_path, f"""
data:
  cold_start:
    - {{path: {default}, reply: {{markers: open_thoughts}}, drop: [no_think_block]}}
  thinking:
    - {{path: {metadata}, columns: {{problem: prompt}}, reply: {{reasoning: deepseek_reasoning, answer: deepseek_solution}}}}
""")
    cold = loaded["cold_start"]
    assert cold.dropped == {"no_think_block": 1}
    assert cold.rows[0]["messages"] == [
        {"role": "user", "content": "Return your final response within \\boxed{}. What is 6 times 7?"},
        {"role": "assistant", "content": assemble_response("Okay, so 6 times 7. 6 times 7 is 42.",
                                                           "The product is $\\boxed{42}$.")}]
    assert not any("<|" in m["content"] for r in cold.rows for m in r["messages"])
    traces = loaded["thinking"].rows
    assert [_thinks(r) for r in traces] == [r["deepseek_reasoning"] for r in shapes.OPEN_THOUGHTS_METADATA]
    assert parse_response(traces[0]["messages"][-1]["content"]).answer == "$9^2 = \\boxed{81}$"


def test_s1k_thinking_trajectories_and_attempt_make_the_reply(tmp_path):
    path = shapes.write_s1k(tmp_path / "data").relative_to(tmp_path)
    loaded = _load(tmp_path, f"""
data:
  cold_start:
    - {{path: {path}, columns: {{question: prompt}}, reply: {{reasoning: thinking_trajectories, answer: attempt}}}}
""")
    rows = loaded["cold_start"].rows
    for row, source in zip(rows, shapes.S1K):
        assert row["messages"] == [{"role": "user", "content": source["question"]},
                                   {"role": "assistant",
                                    "content": assemble_response(source["thinking_trajectories"][0], source["attempt"])}]
        assert _thinks(row)


def test_sharegpt_conversations_are_messages(tmp_path):
    shapes.write_sharegpt(tmp_path / "data")
    loaded = _load(tmp_path, """
data:
  non_reasoning: {path: data/ShareGPT/ShareGPT_V3_unfiltered_cleaned_split.json}
""")
    rows = loaded["non_reasoning"].rows
    assert [m["role"] for m in rows[1]["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    assert rows[1]["messages"][-1]["content"] == "<think>\n\n</think>\n\nBlue."
    assert [r["thinking"] for r in rows] == [False, False] and rows[0]["id"] == "QWJhYvA_0"


def _code(code: str) -> str:
    return f"<think>\nWriting it.\n</think>\n\n```python\n{code}\n```"


def _judges(row: dict, reference: str, wrong: str, forgeries: list[str]) -> None:
    """The reference solution is paid, a wrong program and every forgery earn 0 (code_judge)."""
    assert verify_row(_code(reference), row) == (1.0, "tests_passed"), row["tests"]
    assert verify_row(_code(wrong), row)[0] == 0.0
    for forged in forgeries:
        assert verify_row(_code(forged), row)[0] == 0.0, forged


# What a reward-seeking reply writes instead of solving: an object that equals anything, an exit
# before the call returns, the shown answer printed or returned whatever the input.
EQUALS_ANYTHING = ("class R(str):\n    __hash__ = str.__hash__\n    def __eq__(self, o):\n        return True\n"
                   "def {name}(*a, **k):\n    return R()\n")
EXITS_EARLY = "import os\ndef {name}(*a, **k):\n    os._exit(0)\n"
PRINTS = "def {name}(*a, **k):\n    print({shown!r})\n    return {shown!r}\n"


def test_verifiable_coding_tests_come_from_verification_info_stdin_and_function_call_alike(tmp_path):
    path = shapes.write_verifiable_coding(tmp_path / "data").relative_to(tmp_path)
    loaded = _load(tmp_path, f"""
data:
  general_prompts:
    - {{path: {path}, tests_from: {{format: verifiable_coding}}}}
stages:
  general_rl: {{rewards: {{code: 1.0}}}}
""")
    stdin, calls = loaded["general_prompts"].rows
    assert [(t["input"], t["output"]) for t in stdin["tests"]] == [("3\n1 2 3\n", "6\n"), ("1\n-4\n", "-4\n")]
    assert stdin["prompt"][0]["content"].startswith("Read n")
    assert [(t["call"], t["expected"]) for t in calls["tests"]] == [("digits_sum(123)", "6"), ("digits_sum(0)", "0"),
                                                                    ("digits_sum(9875)", "29")]
    _judges(stdin, "n = int(input())\nprint(sum(map(int, input().split())))", "print(6)", ["print('6')"])
    _judges(calls, "def digits_sum(n):\n    return sum(map(int, str(n)))", "def digits_sum(n):\n    return n % 9",
            [EQUALS_ANYTHING.format(name="digits_sum"), EXITS_EARLY.format(name="digits_sum")])
    # the test cases mapped as they are: a function_call case would run as a stdin program
    with pytest.raises(DatasetError, match=r"row 1: column 'tests' item 0: a function_call case .*tests_from"):
        _load(tmp_path, f"data:\n  general_prompts: [{{path: {path}, kind: code, "
                        "columns: {verification_info.test_cases: tests}}]\n"
                        "stages:\n  general_rl: {rewards: {code: 1.0}}\n")


def test_mbpp_asserts_become_calls_with_their_setup_and_the_first_test_shown(tmp_path):
    path = shapes.write_mbpp(tmp_path / "data").relative_to(tmp_path)
    loaded = _load(tmp_path, f"""
data:
  general_prompts:
    - {{path: {path}, columns: {{text: prompt}}, tests_from: {{format: mbpp}}, drop: [forgeable_tests]}}
stages:
  general_rl: {{rewards: {{code: 1.0}}}}
""")
    role = loaded["general_prompts"]
    assert role.dropped == {"forgeable_tests": 1}   # `assert pick_between(1, 5) in range(1, 6)`
    for row, source, name in zip(role.rows, shapes.MBPP, ["remove_Occ", "similar_elements", "volume_sphere"]):
        assert row["kind"] == "code" and row["prompt"][0]["content"].endswith(source["test_list"][0])
        assert [t.get("hidden", False) for t in row["tests"]][:2] == [False, True]
        shown = row["tests"][0]["expected"]
        _judges(row, source["code"], "def remove_Occ(s, ch):\n    return s\ndef similar_elements(a, b):\n"
                "    return a\ndef volume_sphere(r):\n    return r ** 3", [
                    EQUALS_ANYTHING.format(name=name), EXITS_EARLY.format(name=name),
                    PRINTS.format(name=name, shown=ast.literal_eval(shown))])
    remove, shared, sphere = role.rows
    assert [t["call"] for t in remove["tests"]][-2:] == ["remove_Occ('hellolloll', 'l')", "remove_Occ('', 'l')"]
    assert shared["tests"][0] == {"call": "set(similar_elements((3, 4, 5, 6), (5, 7, 4, 10)))", "expected": "{4, 5}"}
    assert sphere["tests"][0] == {"call": "volume_sphere(10)", "expected": "4188.790204786391", "rel_tol": 0.001,
                                  "setup": "import math"}


def test_humaneval_check_becomes_calls_of_the_entry_point_and_evalplus_inputs_too(tmp_path):
    plain, plus = (p.relative_to(tmp_path) for p in shapes.write_humaneval(tmp_path / "data"))
    loaded = _load(tmp_path, f"""
data:
  general_prompts:
    - {{path: {plain}, tests_from: {{format: humaneval}}, forgeable_tests: run_in_child}}
    - {{path: {plus}, tests_from: {{format: humaneval}}}}
stages:
  general_rl: {{rewards: {{code: 1.0}}}}
""")
    role = loaded["general_prompts"]
    close, truncate, shift, truncate_plus = role.rows
    assert close["prompt"][0]["content"].startswith("Complete the following Python function.")
    assert close["tests"][0]["call"] == "has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3)"
    assert truncate["tests"][1]["abs_tol"] == 1e-6 and "hidden" not in truncate["tests"][0]  # the docstring's example
    assert len(truncate_plus["tests"]) == 4 and truncate_plus["tests"][1]["expected"] == "0.33000000000000007"
    assert [("assert" in t) for t in shift["tests"]] == [True]   # a loop over random inputs: run as a whole
    assert any("1 of 3 code rows hold forgeable tests" in n for n in role.notes)
    # a whole function is judged with the prompt run first (its `from typing import List`); a reply that
    # only continues the body defines nothing
    whole = ("def has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
             "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])")
    assert verify_row(_code(whole), close) == (1.0, "tests_passed")
    assert verify_row(_code(shapes.HUMANEVAL[0]["canonical_solution"]), close)[0] == 0.0
    for row, source in zip(role.rows, shapes.HUMANEVAL + shapes.HUMANEVAL_PLUS):
        name = source["entry_point"]
        # the reference as a reply writes it: the whole function, the prompt's imports and helpers given
        _judges(row, source["prompt"] + source["canonical_solution"], f"def {name}(*a):\n    return a[0]",
                [] if "assert" in row["tests"][0] else [EQUALS_ANYTHING.format(name=name),
                                                        EXITS_EARLY.format(name=name)])


def test_taco_input_output_gives_stdin_tests_and_calls_of_fn_name(tmp_path):
    path = shapes.write_taco(tmp_path / "data").relative_to(tmp_path)
    loaded = _load(tmp_path, f"""
data:
  general_prompts:
    - path: {path}
      columns: {{question: prompt}}
      values: {{difficulty: {{EASY: 1, MEDIUM: 2, MEDIUM_HARD: 3, HARD: 4, VERY_HARD: 5}}}}
      tests_from: {{format: apps}}
stages:
  general_rl: {{rewards: {{code: 1.0}}}}
""")
    stdin, codewars, leetcode = loaded["general_prompts"].rows
    assert [r["difficulty"] for r in (stdin, codewars, leetcode)] == [1, 1, 2]
    assert [t.get("hidden", False) for t in stdin["tests"]] == [False, True, True]   # the statement's example
    assert codewars["tests"][0]["call"] == "square_sum([1, 2])" and codewars["tests"][0]["also"] == ["[5]"]
    assert leetcode["tests"][0]["call"].startswith("Solution().maxSubArray(")
    assert "def square_sum(numbers):" in codewars["prompt"][0]["content"]
    for row, source in zip((stdin, codewars, leetcode), shapes.TACO):
        reference = json.loads(source["solutions"])[0]
        if row is stdin:
            _judges(row, reference, "print(3)", ["print('3')", "import os\nos._exit(0)"])
        else:
            name = json.loads(source["input_output"])["fn_name"]
            wrapped = f"class Solution:\n    def {name}(self, *a):\n        return {name}(*a)\n" \
                if row is leetcode else ""
            _judges(row, reference, wrapped + f"def {name}(*a):\n    return 5",
                    [wrapped + EQUALS_ANYTHING.format(name=name), wrapped + EXITS_EARLY.format(name=name)])


def test_nemotron_reasoning_on_off_is_mapped_to_the_mode(tmp_path):
    path = shapes.write_nemotron(tmp_path / "data").relative_to(tmp_path)
    loaded = _load(tmp_path, f"""
data:
  thinking:
    - path: {path}
      columns: {{input: prompt, output: completion, reasoning: thinking}}
      values: {{thinking: {{"on": true, "off": false}}}}
""")
    think, plain = loaded["thinking"].rows
    assert _thinks(think) == "5 plus 8 is 13."
    assert plain["thinking"] is False and plain["messages"][-1]["content"] == "<think>\n\n</think>\n\nBonjour."


def test_an_unquoted_yaml_boolean_as_a_value_map_key_is_refused(tmp_path):
    from posttrain.config.pipeline import ConfigError
    from posttrain.config.loading import load_config

    (tmp_path / "config.yaml").write_text("data:\n  thinking: {path: d.jsonl, values: {thinking: {on: true, off: false}}}\n")
    with pytest.raises(ConfigError, match="quote"):
        load_config(tmp_path / "config.yaml", project_root=tmp_path)


def test_revision_of_an_hf_source_is_passed_to_load_dataset_and_named_in_the_label(tmp_path, monkeypatch):
    import datasets

    from posttrain.data.sources import SourceConfig, load_role

    seen = []

    def fake_load_dataset(name, config=None, *, split, revision=None):
        seen.append((name, config, split, revision))
        return datasets.Dataset.from_list(shapes.GSM8K)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    source = SourceConfig(hf="openai/gsm8k", hf_config="main", revision="e53f048", kind="math",
                          columns={"question": "prompt"}, answer_from={"column": "answer", "extract": "gsm8k"})
    role = load_role("reasoning_prompts", [source], tmp_path, 0)
    assert source.label == "hf:openai/gsm8k/main@e53f048[train]" and list(role.hashes) == [source.label]
    assert set(seen) == {("openai/gsm8k", "main", "train", "e53f048")}
    with pytest.raises(ValueError, match="revision"):
        SourceConfig(path="d.jsonl", revision="main")


def test_a_transform_changes_the_data_hash_a_stage_is_keyed_on_and_the_config_hash(tmp_path):
    """flows/tasks.py keys a stage on the md5 of each prepared role file (not on the source
    settings): a transform that changes the rows changes that md5; `config_hash` (a version's
    lineage tag) holds the source settings themselves."""
    from posttrain.config.loading import config_hash, load_config
    from posttrain.data.prepared import prepare

    shapes.write_gsm8k(tmp_path / "data")
    source = ("{path: data/gsm8k/main/train-00000-of-00001.parquet, kind: math, columns: {question: prompt}, "
              "answer_from: {column: answer, extract: %s}}")
    keys = []
    for extract in ("gsm8k", "regex, pattern: '#### (.*)'"):
        path = tmp_path / "config.yaml"
        path.write_text(f"data:\n  reasoning_prompts: [{source % extract}]\n")
        cfg = load_config(path, project_root=tmp_path)
        prepared = prepare(cfg, tmp_path / "prepared", ("reasoning_rl",))
        keys.append((prepared.roles["reasoning_prompts"].md5, config_hash(cfg)))
    (plain_md5, plain_cfg), (regex_md5, regex_cfg) = keys
    assert plain_md5 != regex_md5 and plain_cfg != regex_cfg   # "1234" against "1,234"


def test_dropped_rows_reach_the_prepared_roles_lineage_and_the_report_card(tmp_path):
    from posttrain.config.loading import load_config
    from posttrain.data.prepared import prepare
    from posttrain.evaluation.report import render_markdown
    from posttrain.schema import RunReport

    shapes.write_competition_math(tmp_path / "data")
    path = tmp_path / "config.yaml"
    path.write_text("""
data:
  reasoning_prompts:
    - path: data/competition_math/train.parquet
      kind: math
      columns: {problem: prompt, level: difficulty}
      values: {difficulty: "Level (\\\\d+)"}
      answer_from: {column: solution, extract: boxed}
      drop: [no_answer, unmapped_value]
""")
    prepared = prepare(load_config(path, project_root=tmp_path), tmp_path / "prepared", ("reasoning_rl",))
    assert prepared.roles["reasoning_prompts"].dropped == {"no_answer": 1, "unmapped_value": 1}
    notes = [n for d in prepared.loaded.values() for n in d.notes]
    card = render_markdown(RunReport(run_id="r", data_notes=notes))
    assert "## Data" in card and "dropped 2 of 5 rows" in card
