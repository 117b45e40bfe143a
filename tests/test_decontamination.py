"""Decontamination beyond exact text (posttrain.data.decontamination): a MATH-style training file holding
a MATH-500 problem with its spacing, LaTeX spacing and one word changed is caught, named by role,
file, row and suite item, and refused (or dropped and counted with `action: drop`); a different
problem sharing stock phrases is not; the embedded world stays clean."""
import re
import subprocess
import sys

import pytest
import yaml

import published_shapes as shapes
from conftest import config_error
from posttrain.data.files import DatasetError
from posttrain.data.decontamination import DecontaminationConfig, EvalIndex, find_contamination, tokens_of
from posttrain.data.sources import RoleData

POLAR = shapes.MATH500[0]["problem"]   # "Convert the point $(0,3)$ in rectangular coordinates to polar ..."
# The same problem as a training file might hold it: other spacing, LaTeX spacing and sizing, \leq for
# \le, and one word changed (rectangular -> Cartesian).
POLAR_EDITED = ("Convert  the point $\\left( 0,\\,3 \\right)$ in Cartesian coordinates to polar coordinates.\n"
                "Enter your answer in the form $(r,\\;\\theta),$ where $r>0$ and $0\\leq\\theta<2\\pi.$")
# A different problem sharing stock phrases with it ("the point $(0,3)$", "Enter your answer in the form").
SHARES_PHRASES = ("Find the distance from the point $(0,3)$ to the line $y = x$.  Enter your answer in the form "
                  "$a\\sqrt{b}$, where $a$ and $b$ are positive integers.")
MATH_TRAIN = [
    {"problem": "Simplify $\\frac{3}{6}$.", "level": "Level 1", "type": "Prealgebra",
     "solution": "$\\frac{3}{6} = \\boxed{\\frac{1}{2}}$."},
    {"problem": POLAR_EDITED, "level": "Level 2", "type": "Precalculus",
     "solution": "$r = 3$ and $\\theta = \\frac{\\pi}{2}$, so $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$."},
    {"problem": SHARES_PHRASES, "level": "Level 4", "type": "Geometry",
     "solution": "The distance is $\\frac{3}{\\sqrt{2}} = \\boxed{\\frac{3\\sqrt{2}}{2}}$."},
]
CONFIG = r"""
data:
  reasoning_prompts:
    - path: data/competition_math/train.parquet
      kind: math
      columns: {problem: prompt, level: difficulty}
      values: {difficulty: "Level (\\d+)"}
      answer_from: {column: solution, extract: boxed}
  eval:
    - name: math500
      kind: math
      sources: {path: data/MATH-500/test.jsonl, columns: {problem: prompt, level: difficulty}}
"""


def _project(tmp_path, extra: str = "") -> object:
    from posttrain.config.loading import load_config

    shapes.write_math500(tmp_path / "data")
    shapes._parquet(tmp_path / "data" / "competition_math" / "train.parquet", MATH_TRAIN)
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG + extra)
    return load_config(path, project_root=tmp_path)


def _row(text: str) -> dict:
    return {"prompt": [{"role": "user", "content": text}]}


def test_tokens_ignore_case_spacing_latex_spacing_and_thousands_separators():
    assert tokens_of("Find $\\dfrac{1,000}{x}$ \\, if  X \\leq 3") == tokens_of("find $\\frac{1{,}000}{x}$ if x\\le 3")
    assert tokens_of("$\\left( 3x \\right)$") == tokens_of("(3 x)") == ["3", "x"]
    assert tokens_of("What is 2+2? /think") == ["what", "is", "2", "+", "2"]
    assert tokens_of("小明有3个苹果") == ["小", "明", "有", "3", "个", "苹", "果"]


def test_an_edited_math500_problem_is_caught_and_a_problem_sharing_phrases_is_not():
    index = EvalIndex({"math500": RoleData([_row(POLAR), _row(shapes.MATH500[2]["problem"])])}, DecontaminationConfig())
    assert index.overlaps(_row(POLAR_EDITED))[0] > 0.7
    assert index.overlaps(_row(SHARES_PHRASES)).get(0, 0.0) <= 0.5
    assert index.overlaps(_row("Compute $\\dbinom{9}{2}$.")) == {}
    # 22 tokens, a name changed in the middle: no 13-gram survives on either side, 8-grams do.
    edited = "Evelyn ran 4.5 miles in 1.25 hours and Brenda ran 2 miles in 1 hour.  Who had the greater average speed?"
    assert index.overlaps(_row(edited))[1] > 0.9


def test_contamination_is_refused_naming_role_file_row_suite_item_and_the_setting(tmp_path):
    from posttrain.data.prepared import load_all

    with pytest.raises(DatasetError) as err:
        load_all(_project(tmp_path), require=False)
    message = str(err.value)
    assert "training data contaminates evaluation" in message and "\n" not in message
    assert "suite 'math500': 1 training rows overlap it (reasoning_prompts 1)" in message
    assert re.search(r"role 'reasoning_prompts' \S*competition_math/train.parquet row 1 ~ suite 'math500' item 0 "
                     r"\(\S*MATH-500/test.jsonl:1\), overlap 0\.\d\d", message)
    assert "`data.decontamination.action: drop`" in message and "`data.decontamination.max_overlap`" in message


def test_drop_removes_the_contaminated_rows_counts_them_and_keeps_the_rest(tmp_path):
    from posttrain.data.prepared import load_all

    loaded = load_all(_project(tmp_path, "  decontamination: {action: drop}\n"), require=False)
    role = loaded["reasoning_prompts"]
    assert [r["prompt"][0]["content"] for r in role.rows] == [MATH_TRAIN[0]["problem"], SHARES_PHRASES]
    assert role.dropped == {"contaminated": 1}
    assert any("dropped 1 rows overlapping evaluation (suite 'math500' 1" in n for n in role.notes)
    assert len(loaded["eval:math500"].rows) == 3   # the suite itself is never touched


def test_drop_counts_every_upsampled_copy_and_the_prepared_lineage_says_so(tmp_path):
    import json

    from posttrain.config.loading import load_config
    from posttrain.data.prepared import prepare

    shapes.write_math500(tmp_path / "data")
    # "If $2x = 1$, what is $x$?" (MATH-500 item 1) is 8 tokens: the row below holds all of it.
    (tmp_path / "small.jsonl").write_text(json.dumps({"prompt": "If $2x = 1$, what is $x$ and twice $x$?",
                                                      "answer": "1/2"}) + "\n")
    (tmp_path / "other.jsonl").write_text("".join(json.dumps({"prompt": f"What is {i} plus 2?", "answer": str(i + 2)})
                                                  + "\n" for i in range(3)))
    (tmp_path / "c.yaml").write_text("""
data:
  reasoning_prompts:
    - {path: small.jsonl, kind: math, weight: 3}
    - {path: other.jsonl, kind: math, weight: 1}
  eval:
    - {name: math500, kind: math, sources: {path: data/MATH-500/test.jsonl, columns: {problem: prompt}}}
  decontamination: {action: drop}
""")
    prepared = prepare(load_config(tmp_path / "c.yaml", project_root=tmp_path), tmp_path / "prepared", ("reasoning_rl",))
    ref = prepared.roles["reasoning_prompts"]   # 4 rows: the one-row file upsampled to 3 copies, and 1 other
    assert ref.dropped == {"contaminated": 3} and ref.rows == 1


def test_a_short_item_counts_only_when_the_row_holds_all_of_it():
    short = "Find the value of $x$ such that $\\sqrt{x+7} = 9$."   # 13 tokens: 8 of them a stock phrase
    index = EvalIndex({"math500": RoleData([_row(short)])}, DecontaminationConfig())
    sibling = _row("Find the value of $x$ such that $\\sqrt{2x+1} = 5$.")
    assert index.overlaps(sibling)[0] > 0.5 and index.items[0].limit == 12 / 13
    evals = {"math500": RoleData([_row(short)])}
    assert not find_contamination({"r": RoleData([sibling])}, evals, DecontaminationConfig())
    copy = _row("Solve this:  find the value of $x$ such that $\\sqrt{x + 7}=9$ .")
    assert [c.overlap for c in find_contamination({"r": RoleData([copy])}, evals, DecontaminationConfig())] == [1.0]


def test_short_questions_still_count_on_the_exact_check():
    settings = DecontaminationConfig()
    evals = {"math": RoleData([_row("What is 2 plus 2?")])}
    found = find_contamination({"reasoning_prompts": RoleData([_row("what is 2 plus 2 /think")])}, evals, settings)
    assert [(c.suite, c.overlap) for c in found] == [("math", 1.0)]
    assert not find_contamination({"r": RoleData([_row("What is 2 plus 3?")])}, evals, settings)


def test_every_training_role_is_compared_preferences_included():
    evals = {"math500": RoleData([_row(POLAR)])}
    pair = {"prompt": [{"role": "user", "content": POLAR_EDITED}], "chosen": [{"role": "assistant", "content": "a"}],
            "rejected": [{"role": "assistant", "content": "b"}]}
    sft = {"messages": [{"role": "user", "content": POLAR_EDITED}, {"role": "assistant", "content": "x"}]}
    found = find_contamination({"preferences": RoleData([pair]), "cold_start": RoleData([sft])}, evals,
                               DecontaminationConfig())
    assert {c.role for c in found} == {"preferences", "cold_start"}


def test_settings_are_checked(tmp_path):
    assert "min_ngram (14) is more than ngram (13)" in config_error(tmp_path, "data: {decontamination: {min_ngram: 14}}")
    assert "data.decontamination.action" in config_error(tmp_path, "data: {decontamination: {action: warn}}")
    assert "data.decontamination.max_overlap" in config_error(tmp_path, "data: {decontamination: {max_overlap: 1}}")


def test_a_stricter_threshold_or_shorter_ngrams_are_settings():
    evals = {"math500": RoleData([_row(POLAR)])}
    train = {"reasoning_prompts": RoleData([_row(POLAR_EDITED)])}
    assert find_contamination(train, evals, DecontaminationConfig())
    assert not find_contamination(train, evals, DecontaminationConfig(max_overlap=0.9))


def test_the_embedded_world_is_clean_under_the_default_settings(tmp_path):
    from conftest import write_smoke_config
    from posttrain.config.loading import load_config
    from posttrain.data.sources import SourceConfig, load_role
    from posttrain.world.build import EVAL_FILES, FILE_ROLES, ROLE_FILES, WorldPaths, build_data

    cfg = load_config(write_smoke_config(tmp_path))
    build_data(cfg)
    paths = WorldPaths(cfg.path(cfg.paths.world))

    def load(name: str, role: str) -> RoleData:
        return load_role(role, [SourceConfig(path=str(paths.file(name)))], tmp_path, 0)

    train = {name: load(name, FILE_ROLES[name]) for name in ROLE_FILES}
    evals = {name: load(name, f"eval:{name}") for name in EVAL_FILES}
    assert find_contamination(train, evals, DecontaminationConfig()) == []


def test_data_check_reports_the_dropped_rows_and_refuses_in_one_line(tmp_path):
    _project(tmp_path)

    def check(extra: str) -> subprocess.CompletedProcess:
        path = tmp_path / "cfg.yaml"
        path.write_text(CONFIG + extra)
        return subprocess.run([sys.executable, "-m", "posttrain.cli", "data", "check", "--config", str(path)],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)

    refused = check("")
    last = refused.stderr.strip().splitlines()[-1]   # (above it: `datasets` reading the parquet file)
    assert refused.returncode == 2 and "contaminates evaluation" in last and "action: drop" in last
    dropped = check("  decontamination: {action: drop}\n")
    assert dropped.returncode == 0, dropped.stderr
    assert "note: role 'reasoning_prompts': dropped 1 rows overlapping evaluation" in dropped.stdout
    assert re.search(r"train/eval overlap: 0 rows \(8- to 13-grams, max_overlap 0.5, action drop; suites math500, "
                     r"dropped reasoning_prompts 1\)", dropped.stdout)


def test_the_yaml_section_round_trips():
    text = yaml.safe_dump({"ngram": 13, "min_ngram": 8, "max_overlap": 0.5, "action": "drop"})
    assert DecontaminationConfig.model_validate(yaml.safe_load(text)).action == "drop"
