"""Code tests in their published forms (posttrain.data.code_tests): which asserts become a call judged
in the parent and which stay forgeable programs, the parts the child runs around the candidate
(prelude, setup) and the comparisons a case may ask for (rewards/code_cases.py), forgeable tests
refused unless a source accepts them and then counted everywhere data is reported, reference
solutions run by `data check`, and the code attack families against rows of every form. One test
per dataset, through the config alone, is in test_published_datasets.py."""
from __future__ import annotations

import ast
import json
import random
import re
import subprocess
import sys

import pytest

import published_shapes as shapes
import test_code_attacks as attacks
from posttrain.data.code_tests import FORMS, assert_to_case
from posttrain.data.files import DatasetError
from posttrain.rewards.code_judge import code_execution, run_tests
from posttrain.rewards.code_judge import test_problem as case_problem

isolated = attacks.isolated

CONVERTED = [
    ('assert remove_Occ("hello","l") == "heo"', {"call": "remove_Occ('hello', 'l')", "expected": "'heo'"}),
    ("assert (f(1, [2])) == (3, None), 'a message'", {"call": "f(1, [2])", "expected": "(3, None)"}),
    ("assert -2.5 == f(1)", {"call": "f(1)", "expected": "-2.5"}),
    ("assert f(0) is None", {"call": "f(0)", "expected": "None"}),
    ("assert set(f((3, 4), (4, 5))) == set((4,))", {"call": "set(f((3, 4), (4, 5)))", "expected": "{4}"}),
    ("assert sorted(f(1)) == sorted([3, 2])", {"call": "sorted(f(1))", "expected": "[2, 3]"}),
    ("assert math.isclose(f(2), 1.5, rel_tol=0.001)", {"call": "f(2)", "expected": "1.5", "rel_tol": 0.001}),
    ("assert abs(candidate(1.33) - 0.33) < 1e-6", {"call": "candidate(1.33)", "expected": "0.33", "abs_tol": 1e-6}),
    ("assert f(4)", {"call": "bool(f(4))", "expected": "True"}),
    ("assert not f(5)", {"call": "bool(f(5))", "expected": "False"}),
]
FORGEABLE = ["assert f(1) != 3", "assert f(1) < 3", "assert 2 in f(1)", "assert f(1) == g(2)",
             "assert f(1) == 3 == f(2)", "assert f(1) == x", "assert (f(1) > 2) == True", "assert f(1) is 3",
             "assert f(2) == float('nan')", "assert f(1) == 1 and f(2) == 2", "x = f(1)\nassert x == 2"]


def test_asserts_become_calls_and_literals_or_stay_forgeable_programs():
    for text, case in CONVERTED:
        assert assert_to_case(text) == case, text
        assert case_problem(case) is None
    for text in FORGEABLE:
        assert assert_to_case(text) == {"assert": text, "forgeable": True}, text
    # a name `check` binds itself is no literal: the whole check runs, as a forgeable program
    row = {"prompt": "def f(x):\n    pass\n", "entry_point": "f",
           "test": "def check(candidate):\n    x = [1, 2]\n    assert candidate(x) == 3\n    assert candidate([4]) == 4\n"}
    (case, _), (whole, _) = FORMS["humaneval"](row, "w")
    assert case["call"] == "f([4])" and whole["assert"].endswith("check(f)\n") and whole["forgeable"] is True


@isolated
def test_the_child_runs_the_tests_own_code_and_the_parent_compares_as_the_case_asks():
    code = "def area(r):\n    return PI * r * r\ndef pair(x):\n    return (x, [x])\n"
    tests = [{"call": "area(2)", "expected": "12.566", "abs_tol": 1e-3, "prelude": "PI = 3.14159265"},
             {"call": "area(2)", "expected": "12.566", "rel_tol": 1e-4, "prelude": "PI = 3.14159265"},
             {"call": "shown(pair(1))", "expected": "[1, [1]]", "tuples_as_lists": True, "prelude": "PI = 0",
              "setup": "def shown(v):\n    return v"},
             {"call": "pair(2)", "expected": "'nothing'", "also": ["(2, [2])"], "prelude": "PI = 0"},
             {"assert": "assert area(1) > 3", "forgeable": True, "prelude": "PI = 3.14"}]
    assert run_tests(code, tests, mode="fraction").passed == 5
    strict = [{**tests[0], "abs_tol": 1e-9}, {k: v for k, v in tests[2].items() if k != "tuples_as_lists"},
              {**tests[3], "also": ["(2, [3])"]}, {**tests[4], "assert": "assert area(1) > 4"}]
    verdict = run_tests(code, strict, mode="fraction")
    assert verdict.passed == 0, verdict.details
    # an assert program passes only by finishing: exiting before it runs is no pass
    assert run_tests("import os\nos._exit(0)\n", tests[4:]).reward == 0.0
    bad = [{"assert": "assert f()"}, {**tests[0], "abs_tol": -1}, {**tests[0], "setup": "def ("},
           {**tests[0], "also": ["object()"]}, {**tests[4], "call": "f()"},
           {"input": "[1]", "output": "[2]", "type": "function_call", "fn_name": "f"}]   # would run as stdin
    assert all(case_problem(t) for t in bad)


def _mbpp_config(tmp_path, extra: str) -> str:
    path = shapes.write_mbpp(tmp_path / "data").relative_to(tmp_path)
    return (f"data:\n  general_prompts:\n    - {{path: {path}, columns: {{text: prompt}}, tests_from: {{format: mbpp}}"
            f"{extra}}}\nstages:\n  general_rl: {{rewards: {{code: 1.0}}}}\n")


def _load(tmp_path, text: str):
    from posttrain.config.loading import load_config
    from posttrain.data.prepared import load_all

    (tmp_path / "config.yaml").write_text(text)
    cfg = load_config(tmp_path / "config.yaml", project_root=tmp_path)
    return cfg, load_all(cfg, require=False)


@isolated
def test_forgeable_tests_are_refused_unless_accepted_and_then_named_in_data_check_alerts_and_the_card(tmp_path):
    from posttrain.data.code_tests import forgeable_code_rows
    from posttrain.evaluation.report import render_markdown
    from posttrain.schema import RunReport
    from posttrain.data.sources import role_summary

    with pytest.raises(DatasetError, match=r"train-00000-of-00001.parquet row 3: column 'test_list' item 0: "
                                           r"'assert pick_between\(1, 5\) in range\(1, 6\)'.*"
                                           r"`forgeable_tests: run_in_child`.*`drop: \[forgeable_tests\]`"):
        _load(tmp_path, _mbpp_config(tmp_path, ""))
    _, loaded = _load(tmp_path, _mbpp_config(tmp_path, ", forgeable_tests: run_in_child"))
    role = loaded["general_prompts"]
    note = "1 of 4 code rows hold forgeable tests (2 assert programs run in the child"
    assert any(note in n for n in role.notes) and role_summary(role.rows)["code_with_forgeable_tests"].startswith(note)
    assert forgeable_code_rows(role.rows).startswith(note)   # what the RL stages add to their alerts
    assert note in render_markdown(RunReport(run_id="r", data_notes=role.notes))
    pick = role.rows[3]
    assert [("assert" in t, t.get("hidden", False)) for t in pick["tests"]] == [(True, False), (False, True),
                                                                                (True, True)]
    reply = "```python\n{}\n```"
    assert code_execution([reply.format("def pick_between(a, b):\n    return (a + b) // 2")], [pick["tests"]]) == [1.0]
    # why they are named: an object that equals anything passes `in range(...)` in the child...
    liar = "class R:\n    def __eq__(self, o):\n        return True\ndef pick_between(a, b):\n    return R()\n"
    assert run_tests(liar, pick["tests"][:1]).reward == 1.0
    # ...while the call judged in the parent catches it, and the row pays nothing
    assert code_execution([reply.format(liar)], [pick["tests"]]) == [0.0]
    # the same in a row's own `tests` column
    own = {"prompt": "Write f.", "kind": "code", "tests": [{"call": "f()", "expected": "1"},
                                                          {"assert": "assert f() != 2", "forgeable": True}]}
    (tmp_path / "own.jsonl").write_text(json.dumps(own) + "\n")
    with pytest.raises(DatasetError, match=r"own.jsonl:1: column 'tests' item 1 is a forgeable assert program"):
        _load(tmp_path, "data:\n  general_prompts: {path: own.jsonl}\nstages: {general_rl: {rewards: {code: 1.0}}}\n")
    _, loaded = _load(tmp_path, "data:\n  general_prompts: {path: own.jsonl, forgeable_tests: run_in_child}\n"
                                "stages: {general_rl: {rewards: {code: 1.0}}}\n")
    assert loaded["general_prompts"].rows[0]["tests"] == own["tests"]
    # a config that would read tests into another kind, or into SFT rows, is refused
    from posttrain.config.pipeline import ConfigError
    from posttrain.config.loading import load_config

    (tmp_path / "bad.yaml").write_text("data:\n  general_prompts: {path: d.jsonl, kind: math, tests_from: {format: mbpp}}\n")
    with pytest.raises(ConfigError, match="tests_from"):
        load_config(tmp_path / "bad.yaml", project_root=tmp_path)
    with pytest.raises(DatasetError, match="role 'cold_start' holds none"):
        _load(tmp_path, _mbpp_config(tmp_path, "").replace("general_prompts", "cold_start"))


@isolated
def test_data_check_runs_the_reference_solutions_caches_them_and_refuses_a_row_whose_reference_fails(tmp_path):
    from posttrain.data.code_references import data_check_lines

    taco = shapes.write_taco(tmp_path / "data").relative_to(tmp_path)
    text = _mbpp_config(tmp_path, ", forgeable_tests: run_in_child").replace("stages:", (
        f"    - {{path: {taco}, columns: {{question: prompt}}, values: {{difficulty: {{EASY: 1, MEDIUM: 2}}}}, "
        "tests_from: {format: apps}}\nstages:"))
    cfg, _ = _load(tmp_path, text)
    first = list(data_check_lines(cfg))
    assert [line.split(": ", 1)[1].split(" (")[0] for line in first] == ["4 of 4 pass their tests",
                                                                        "3 of 3 pass their tests"]
    assert all("rows/s" in line for line in first) and not any("cached" in line for line in first)
    assert all("cached" in line for line in data_check_lines(cfg, every=True))
    assert list((tmp_path / "runs" / "cache" / "code-references").glob("*.json"))
    # a row whose own tests its reference fails: the tests were misread, or the row pays no right answer
    rows = [dict(r) for r in shapes.MBPP]
    rows[1]["test_list"] = [rows[1]["test_list"][0], "assert set(similar_elements((1, 2),(2, 3))) == set((3,))"]
    shapes._parquet(tmp_path / "data" / "mbpp" / "full" / "train-00000-of-00001.parquet", rows)
    done = subprocess.run([sys.executable, "-m", "posttrain.cli", "data", "check", "--all", "--config",
                           str(tmp_path / "config.yaml")], capture_output=True, text=True, timeout=300)
    error = done.stderr.strip().splitlines()[-1]   # above it: the datasets library's progress bars
    assert done.returncode == 2 and error.startswith("error: "), (done.stdout, done.stderr)
    assert re.search(r"parquet row 1: the dataset's reference solution fails its own tests \(test 1: wrong_answer: "
                     r"set\(similar_elements\(\(1, 2\), \(2, 3\)\)\) -> '\{2\}', expected '\{3\}'\)$", error), error
    assert "reference solutions of data/TACO" in done.stdout and "note: role 'general_prompts'" in done.stdout


def _shown(row: dict) -> tuple[str, list]:
    """(the function an attacker must define, [(call, arguments, answer)] it saw) of a call row: the
    cases the prompt shows, or the first case (an attacker who knows one answer)."""
    cases = [t for t in row["tests"] if "call" in t]
    seen = [t for t in cases if not t.get("hidden")] or cases[:1]
    out, name = [], None
    for t in seen:
        call = ast.parse(t["call"], mode="eval").body
        while isinstance(call.func, ast.Name) and call.func.id in ("set", "sorted", "bool") and call.args:
            call = call.args[0]
        name = ast.unparse(call.func)
        out.append((t["call"], [ast.literal_eval(a) for a in call.args], ast.literal_eval(t["expected"])))
    return name, out


def _defines(name: str) -> str:
    if name.startswith("Solution()."):
        return f"\nclass Solution:\n    def {name.split('.')[1]}(self, *a):\n        return f(*a)\n"
    return f"\n{name} = f\n"


STDIN_ATTACKS = ["print({out!r})", "import os\nprint({out!r}, flush=True)\nos._exit(0)",
                 "import sys\nsys.stdout.write({out!r})\nraise SystemExit(0)"]


@isolated
def test_the_code_attack_families_pay_nothing_on_rows_of_every_published_form(tmp_path):
    for writer in (shapes.write_mbpp, shapes.write_humaneval, shapes.write_taco, shapes.write_verifiable_coding):
        writer(tmp_path / "data")
    _, loaded = _load(tmp_path, f"""
data:
  general_prompts:
    - {{path: data/mbpp/full/train-00000-of-00001.parquet, columns: {{text: prompt}}, tests_from: {{format: mbpp}},
       drop: [forgeable_tests]}}
    - {{path: data/openai_humaneval/openai_humaneval/test-00000-of-00001.parquet, tests_from: {{format: humaneval}},
       drop: [forgeable_tests]}}
    - {{path: data/humanevalplus/data/test-00000-of-00001.parquet, tests_from: {{format: humaneval}}}}
    - {{path: data/TACO/train/data-00000-of-00009.parquet, columns: {{question: prompt}},
       values: {{difficulty: {{EASY: 1, MEDIUM: 2}}}}, tests_from: {{format: apps}}}}
    - {{path: data/verifiable-coding-problems/data/train-00000-of-00010.parquet,
       tests_from: {{format: verifiable_coding}}}}
stages:
  general_rl: {{rewards: {{code: 1.0}}}}
""")
    rng, programs, tests = random.Random(0), [], []
    for row in loaded["general_prompts"].rows:
        if "call" in row["tests"][0]:
            name, shown = _shown(row)
            for kind, attack in attacks.ATTACKS.items():
                for _ in range(2):
                    programs.append(attack(rng, shown) + _defines(name))
                    tests.append(row["tests"])
        else:
            out = next(t["output"] for t in row["tests"] if not t.get("hidden")) if any(
                not t.get("hidden") for t in row["tests"]) else row["tests"][0]["output"]
            programs += [a.format(out=out) for a in STDIN_ATTACKS]
            tests += [row["tests"]] * len(STDIN_ATTACKS)
    assert len(programs) >= 50
    rewards = code_execution([attacks._fenced(p) for p in programs], tests=[json.dumps(t) for t in tests])
    paid = [p for p, r in zip(programs, rewards) if r]
    assert paid == [], paid[:2]
