"""bench/cold_start_variants.py: the cold-start alterations the RL benches train parents on, drawn
independently per alteration, applied to the world's cold-start rows and handed to the stage as
the `data.cold_start` source."""
import json
import sys
from pathlib import Path

import pytest

from posttrain.chat import assemble_response
from posttrain.config.loading import load_config
from posttrain.data.files import DatasetError
from posttrain.data.sources import load_role
from posttrain.world import tasks
from posttrain.world.build import _trace

sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))   # as the bench scripts import it
import cold_start_variants as variants  # noqa: E402


def world_rows(n: int = 200, seed: int = 5) -> tuple[list[dict], list[dict]]:
    """Problems and the cold-start rows the world writes for them (data/world/cold_start.jsonl)."""
    problems = [p.to_row() for p in tasks.math_problems(n, seed, "train")]
    return problems, [_trace(p, thinking=True) for p in problems]


def test_cold_start_rows_alter_the_configured_shares():
    from posttrain.evaluation.suites import reasoning_consistency

    problems, world = world_rows()

    def counts(**shares):
        rows, altered = variants.alter_rows(world, variants.Variant(**shares), seed=1)
        replies = [r["messages"][-1]["content"] for r in rows]
        checked = sum(("check " in t or "验算" in t) for t in replies)
        mixed = sum(reasoning_consistency(t, p["language"]) < 1.0 for t, p in zip(replies, problems))
        return checked, mixed, altered, rows

    checked, mixed, altered, plain = counts()
    assert (checked, mixed, altered) == (0, 0, {"double_checked": 0, "mixed_language": 0, "answer_only": 0,
                                          "tool_episodes_unaltered": 0})
    assert [r["messages"][-1]["content"] for r in plain] == [
        assemble_response(p["reasoning"], tasks.default_math_answer(p["answer"], p["language"])) for p in problems]
    assert plain == world   # nothing altered: the world's rows as they are
    checked, mixed, altered, rows = counts(double_check_share=1.0)
    assert checked == altered["double_checked"] == 200 and mixed == 0
    checked, mixed, altered, rows = counts(double_check_share=0.5, mixed_language_share=0.5)
    assert checked == altered["double_checked"] and 70 < checked < 130
    assert mixed == altered["mixed_language"] and 50 < mixed < 130
    assert [r["messages"][0] for r in rows] == [r["messages"][0] for r in plain]   # same questions


def test_answer_only_solutions_skip_the_working_and_still_grade_as_right():
    from posttrain.rewards.format import format_ok
    from posttrain.rewards.math import verify_math
    from posttrain.world.reflection import is_answer_only

    problems, world = world_rows()
    rows, altered = variants.alter_rows(world, variants.Variant(answer_only_share=0.5), seed=1)
    worked = [p["reasoning"] for p in problems]
    skipped = [(r["messages"][-1]["content"], p, w) for r, p, w in zip(rows, problems, worked)
               if w not in r["messages"][-1]["content"]]
    assert len(skipped) == altered["answer_only"] and 70 < len(skipped) < 130
    for reply, problem, solution in skipped:
        think = reply.split("</think>")[0].removeprefix("<think>\n").strip()
        colon = "：" if problem["language"] == "zh" else ": "
        opening = solution[:solution.index(colon) + len(colon)]
        # The worked solution's opening, then the result: the model chooses at one token.
        assert think == opening + ("所以" if problem["language"] == "zh" else "so ") + str(problem["answer"])
        assert verify_math(reply, str(problem["answer"])).reward == 1.0 and format_ok(reply)
        assert is_answer_only(reply) and is_answer_only(think)
    assert not any(is_answer_only(r["messages"][-1]["content"]) for r, w in zip(rows, worked)
                   if w in r["messages"][-1]["content"])
    # Combined with another alteration, the rows it leaves alone are the other's rows.
    checked_only, _ = variants.alter_rows(world, variants.Variant(double_check_share=0.5), seed=1)
    both, counts = variants.alter_rows(world, variants.Variant(double_check_share=0.5, answer_only_share=0.5), seed=1)
    is_skipped = [w not in r["messages"][-1]["content"] for r, w in zip(rows, worked)]
    for skipped_here, row_both, row_alone, row_checked in zip(is_skipped, both, rows, checked_only):
        assert row_both == (row_alone if skipped_here else row_checked)
    assert counts["answer_only"] == altered["answer_only"]
    assert 0 < counts["double_checked"] == sum(
        ("check " in r["messages"][-1]["content"] or "验算" in r["messages"][-1]["content"])
        for r, skipped_here in zip(checked_only, is_skipped) if not skipped_here)


def _config(tmp_path: Path, source: dict) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps({"data": {"cold_start": source}}))   # JSON is YAML
    return path


def test_variant_replaces_the_cold_start_source_with_the_rows_the_stage_would_read(tmp_path):
    _, world = world_rows(120)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "cold_start.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in world))
    config = _config(tmp_path, {"path": "data/cold_start.jsonl", "limit": 50, "shuffle_seed": 3})
    cfg = load_config(config, project_root=tmp_path)
    override, counts = variants.write_variant(cfg, variants.Variant(double_check_share=0.5), tmp_path / "variants")
    altered_cfg = load_config(config, project_root=tmp_path, overrides=override)
    (source,) = altered_cfg.data.cold_start
    assert Path(source.path).parent == (tmp_path / "variants").absolute() and source.limit is None

    plain = load_role("cold_start", cfg.data.cold_start, tmp_path, cfg.seed).rows
    altered = load_role("cold_start", altered_cfg.data.cold_start, tmp_path, cfg.seed).rows
    # The same 50 rows (shuffled, then limited, as the source says), in the same order, same questions.
    assert len(altered) == len(plain) == counts["examples"] == 50
    assert [r["messages"][0] for r in altered] == [r["messages"][0] for r in plain]
    changed = [a != p for a, p in zip(altered, plain)]
    assert sum(changed) == counts["double_checked"] and 10 < sum(changed) < 40
    assert all(("check " in a["messages"][-1]["content"] or "验算" in a["messages"][-1]["content"]) == c
               for a, c in zip(altered, changed))
    # The draws fall on the rows the stage trains on, in its order: as if those were the only rows.
    by_question = {r["messages"][0]["content"]: r for r in world}
    selected = [by_question[r["messages"][0]["content"]] for r in plain]
    expected, _ = variants.alter_rows(selected, variants.Variant(double_check_share=0.5), cfg.seed)
    assert [r["messages"][-1]["content"] for r in altered] == [r["messages"][-1]["content"] for r in expected]
    # Same content, same file: the override names the data by what it holds.
    again, _ = variants.write_variant(cfg, variants.Variant(double_check_share=0.5), tmp_path / "variants")
    assert again == override


def test_variant_refuses_rows_that_are_not_world_traces(tmp_path):
    _, world = world_rows(3)
    rows = [world[0], {k: v for k, v in world[1].items() if k not in ("a", "b")}]
    (tmp_path / "cold.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    cfg = load_config(_config(tmp_path, {"path": "cold.jsonl"}), project_root=tmp_path)
    with pytest.raises(DatasetError, match=r"cold\.jsonl:2: .*missing a, b"):
        variants.write_variant(cfg, variants.Variant(answer_only_share=1.0), tmp_path / "out")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())   # nothing written


def test_cold_start_settings_split_into_shares_and_stage_overrides():
    variant, rest = variants.split_settings({"answer_only_share": 0.5, "trainer.epochs": 2})
    assert variant == variants.Variant(answer_only_share=0.5) and variant.altered
    assert rest == {"trainer.epochs": 2} and variant.as_dict() == {"answer_only_share": 0.5}
    assert not variants.split_settings({"trainer.epochs": 2})[0].altered
    with pytest.raises(ValueError, match="double_check_share"):
        variants.Variant(double_check_share=1.5)
