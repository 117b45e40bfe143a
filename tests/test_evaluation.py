"""Scoring one evaluation suite: which metrics its kind and mode give, per-language splits, and a
reply cut off at the budget earning nothing."""
from posttrain.config.pipeline import EvalSuiteConfig
from posttrain.evaluation.suites import score_suite
from posttrain.generation.engines import Generation

ROWS = [{"prompt": [{"role": "user", "content": "What is 2 plus 2?"}], "kind": "math", "answer": "4", "language": "en"},
        {"prompt": [{"role": "user", "content": "2加2等于几？"}], "kind": "math", "answer": "4", "language": "zh"}]
RIGHT = "<think>\n2+2=4\n</think>\n\nThe answer is \\boxed{4}."


def _suite(**kw) -> EvalSuiteConfig:
    return EvalSuiteConfig(name="math", kind="math", sources={"path": "unused.jsonl"}, **kw)


def test_a_reply_cut_off_at_the_budget_scores_nothing_even_with_the_right_answer_in_it():
    metrics, per_item = score_suite(_suite(), ROWS, [[Generation(RIGHT, 20, False)], [Generation(RIGHT, 160, True)]])
    assert per_item["math/accuracy"] == [1.0, 0.0] and per_item["math/truncation"] == [0.0, 1.0]
    assert metrics["math/accuracy_en"] == 1.0 and metrics["math/accuracy_zh"] == 0.0


def test_a_suite_reports_the_metrics_of_its_kind_and_mode_only():
    think, _ = score_suite(_suite(mode="think"), ROWS[:1], [[Generation(RIGHT, 20, False)]])
    assert {"math/accuracy", "math/format", "math/language_consistency", "math/truncation"} <= set(think)
    assert "math/mode_compliance" not in think and "math/accuracy_en" not in think   # one language: no split
    no_think, items = score_suite(_suite(mode="no_think"), ROWS[:1],
                                  [[Generation("<think>\n\n</think>\n\nThe answer is \\boxed{4}.", 9, False)]])
    assert no_think["math/mode_compliance"] == 1.0 and "math/language_consistency" not in no_think
    assert [s.name for s in _suite(mode="both").expanded()] == ["math_think", "math_no_think"]


def test_pass_at_one_over_samples_is_the_items_mean():
    _, per_item = score_suite(_suite(sampling={"samples": 4}), ROWS[:1],
                              [[Generation(RIGHT, 20, False)] * 3 + [Generation("no box", 5, False)]])
    assert per_item["math/accuracy"] == [0.75]


def test_evaluate_scores_only_the_suites_it_is_given(tokenizer, tmp_path):
    """`evaluate(..., suites=...)` on a config naming more suites: the ones given, no KeyError for the rest."""
    from posttrain.config.loading import load_config
    from posttrain.data.files import write_jsonl
    from posttrain.evaluation.suites import evaluate
    from posttrain.schema import DatasetRef
    from test_rl_resume import _tiny_model

    write_jsonl(ROWS, tmp_path / "math.jsonl")
    (tmp_path / "c.yaml").write_text(
        "name: t\nevaluation: {max_new_tokens: 8}\ndata:\n  eval:\n"
        "    - {name: math, kind: math, sources: {path: math.jsonl}}\n"
        "    - {name: other, kind: math, sources: {path: math.jsonl}}\n")
    cfg = load_config(tmp_path / "c.yaml")
    given = {"other": DatasetRef(name="other", path=str(tmp_path / "math.jsonl"), md5="x")}
    result = evaluate("unused", cfg, suites=given, model=_tiny_model(tokenizer).eval(), tokenizer=tokenizer)
    assert "other/accuracy" in result.metrics and not any(k.startswith("math/") for k in result.metrics)
