"""bench/reward_attacks.py: every attack family runs through evaluation and the stage reward stacks
and reports what it paid, in the shape the results files take; a sample of every family pays
nothing (the full sweep's counts are in bench/results/reward_attacks.md), while every honest reply
it pairs with its attacks is paid in full, else the family measures nothing."""
import json
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))   # as the bench scripts import it
import reward_attacks as bench  # noqa: E402

CODE = [name for name in bench.FAMILIES if name.startswith("code_")]
TEXT = [name for name in bench.FAMILIES if name not in CODE]
VARIANTS = 5


@pytest.fixture(scope="module")
def harness():
    return bench.Bench()


def _check_family(name: str, family: dict, variants: int) -> None:
    assert family["rule"] == bench.RULE_OF.get(name, "task")
    assert family["variants"] == variants == sum(v["n"] for v in family["by_label"].values())
    assert 0 <= family["paid_evaluation"] <= variants and 0 <= family["paid_training"] <= variants
    assert max(family["paid_evaluation"], family["paid_training"]) <= family["paid_either"] <= variants
    assert family["honest_ok"] == variants, f"{name}: an honest reply is not paid in full"
    assert family["paid_either"] == 0, (name, family["examples"])
    assert len(family["examples"]) == min(3, family["paid_either"]) and family["wall_s"] >= 0
    for example in family["examples"]:
        assert {"label", "reply", "evaluation", "training", "reference"} <= set(example)
        assert "reason" in example["evaluation"] and example["training"]


def test_every_family_makes_seeded_variants_of_its_kinds():
    for name, generate in bench.FAMILIES.items():
        cases = generate(random.Random(f"{name}/3"), 12)
        again = generate(random.Random(f"{name}/3"), 12)
        assert len(cases) == 12 and [c.attack for c in cases] == [c.attack for c in again], name
        assert len({c.label for c in cases}) >= 3 and all(c.attack != c.honest for c in cases), name
        assert all(c.row["kind"] in bench.STAGES for c in cases), name
    assert len(bench.dictionary_words()) > 1000 and len(bench.cjk(random.Random(0), 5)) == 5


def test_the_text_families_report_in_the_results_shape(harness, tmp_path):
    result = bench.run(VARIANTS, seed=7, families=TEXT, bench=harness)   # another seed than the recorded sweep
    assert list(result["families"]) == TEXT and result["variants"] == VARIANTS
    for name, family in result["families"].items():
        _check_family(name, family, VARIANTS)
    json.dumps(result, ensure_ascii=False)   # what main writes
    table = bench.markdown(result, table_only=True)
    assert all(f"| {name} |" in table for name in TEXT)
    assert "## Paid examples" in bench.markdown(result)


def test_shape_families_score_every_mode_switch_and_the_length_reward(harness):
    cases = bench.FAMILIES["mode_mismatch"](random.Random(0), 12)
    assert {c.switch for c in cases} == {"suffix", "template_kwarg", "system_prompt"}
    scored = harness.score(cases)
    assert all({"reasoning_rl", "general_rl"} == set(r["train"]) for r in scored)
    assert all("mode" in r["train"]["general_rl"]["attack"] for r in scored)
    cases = bench.FAMILIES["degenerate_think"](random.Random(0), 3)
    scored = harness.score(cases, ("length",))
    assert all("length" in r["train"]["reasoning_rl"]["attack"] for r in scored)


def test_a_truncated_attack_ends_in_no_stop_token(harness):
    for case in bench.FAMILIES["truncation"](random.Random(1), 10):
        ids = harness.ids(case.attack, "", case.cut)
        assert ids[-1] != harness.tok.eos_token_id and case.cut[0] in harness.decode(ids)
        assert harness.ids(case.honest, "", None)[-1] == harness.tok.eos_token_id


@pytest.mark.slow
def test_the_code_families_report_in_the_results_shape(harness):
    from posttrain.rewards.code_sandbox import sandbox_info

    if sandbox_info()["mode"] == "none":
        pytest.skip("no OS isolation here: the code reward refuses to run code")
    result = bench.run(VARIANTS, seed=0, families=CODE, bench=harness)
    for name, family in result["families"].items():
        _check_family(name, family, VARIANTS)
