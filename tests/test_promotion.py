"""Production alias: checks, history, rollback, locking across processes, crash recovery; lineage
from registry tags; the paired comparison of two evaluations.

Real MLflow SQLite registry in tmp_path, fake checkpoint directories (a few small files, real
digests); no model is loaded or trained.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from posttrain.registry import promotion
from posttrain.registry.checkpoint import directory_digest
from posttrain.registry.lineage import lineage
from posttrain.registry.promotion import PRODUCTION_ALIAS, PromotionError, PromotionRefused
from posttrain.registry.model_registry import Registry
from posttrain.schema import CheckpointRef, GateCheck, GateVerdict
from posttrain.registry.versus_production import compare

pytestmark = pytest.mark.timeout(120)

MODEL = "posttrain-ops"
ACTOR = "tester@host"  # who the tests' moves are recorded as (the CLI passes user@host, a served flow flow-run:<id>)
# version -> (stage, parent version, gate passed?, flow run)
CHAIN = {
    "1": ("cold_start_sft", "base", True, "run-a"),
    "2": ("reasoning_rl", "1", True, "run-a"),
    "3": ("mode_fusion_sft", "2", False, "run-a"),
    "4": ("mode_fusion_sft", "2", True, "run-b"),
    "5": ("general_rl", "4", True, "run-b"),
}
BASE_DIGEST = "sha256:" + "b" * 64


def fake_checkpoint(root: Path, name: str) -> CheckpointRef:
    d = root / "checkpoints" / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"name": name}))
    (d / "model.safetensors").write_bytes(name.encode() * 64)
    (d / "tokenizer.json").write_text("{}")
    return CheckpointRef(path=str(d), digest=directory_digest(d), num_parameters=1000)


def verdict(stage: str, passed: bool) -> GateVerdict:
    return GateVerdict(stage=stage, passed=passed, checks=[
        GateCheck(name="math/accuracy >= 0.1", value=0.5 if passed else 0.01, threshold=0.1, passed=passed)])


def populate(reg: Registry, root: Path) -> dict[str, CheckpointRef]:
    """Register CHAIN (same version numbers) with the pipeline's tags; return the checkpoints.
    run-b's versions carry ``datasets_produced``; run-a's predate that tag (``datasets`` then held
    the produced datasets too)."""
    refs: dict[str, CheckpointRef] = {}
    for version, (stage, parent, passed, run) in CHAIN.items():
        ref = fake_checkpoint(root, f"v{version}-{stage}")
        parent_digest = BASE_DIGEST if parent == "base" else refs[parent].digest
        consumed, produced = {"math_train": "md5-math"}, {}
        if stage == "mode_fusion_sft":
            consumed["rejection_sampled.jsonl"] = "md5-rs"
            produced["fusion_mix.jsonl"] = f"md5-mix-{version}"
        tags = {"flow_run": run, "config_hash": "cfg" + run[-1], "code_revision": "rev" + run[-1],
                "seed": "0", "parent_version": parent, "parent_digest": parent_digest,
                "verifiers": json.dumps({"math": "math-verifier/1"}), "cached": "False"}
        if run == "run-b":
            tags.update(datasets=json.dumps(consumed), datasets_produced=json.dumps(produced))
        else:
            tags.update(datasets=json.dumps(consumed | produced))
        assert reg.register(stage, ref, tags) == version
        reg.record_gate(version, verdict(stage, passed))
        refs[version] = ref
    return refs


@pytest.fixture(scope="session")
def migrated_db(tmp_path_factory):
    """Schema-migrated mlflow.db built once (a fresh store runs ~100 DDL commits)."""
    root = tmp_path_factory.mktemp("template")
    Registry(root, model_name="template")
    return root / "mlflow.db"


def new_registry(root: Path, migrated_db: Path) -> Registry:
    reg_root = root / "runs" / "registry"
    reg_root.mkdir(parents=True)
    shutil.copyfile(migrated_db, reg_root / "mlflow.db")
    return Registry(reg_root, model_name=MODEL)


@pytest.fixture
def world(tmp_path, migrated_db):
    reg = new_registry(tmp_path, migrated_db)
    return reg, populate(reg, tmp_path)


def _consistent(reg: Registry) -> list[dict]:
    """Alias == last committed entry, each entry starts where the previous ended, ids unique."""
    entries = promotion.history(reg)
    assert reg.alias(PRODUCTION_ALIAS) == (entries[-1]["to"] if entries else None)
    assert promotion.current_production(reg) == (entries[-1]["to"] if entries else None)
    for prev, cur in zip([None, *entries], entries):
        assert cur["from"] == (prev["to"] if prev else None), (prev, cur)
    assert len({e["id"] for e in entries}) == len(entries)
    assert not promotion.intent_path(reg).exists()
    return entries


# ---------------------------------------------------------------------------------- checks


def test_promote_refuses_failed_gate(world):
    reg, _ = world
    with pytest.raises(PromotionRefused, match=r"version 3 cannot become production: it was rejected"):
        promotion.promote(reg, "3", actor=ACTOR)
    assert reg.alias(PRODUCTION_ALIAS) is None and promotion.history(reg) == []


def test_promote_refuses_altered_or_missing_checkpoint(world):
    reg, refs = world
    (refs["5"].directory / "model.safetensors").write_bytes(b"tampered")
    with pytest.raises(PromotionRefused, match=r"was altered \(digest sha256:"):
        promotion.promote(reg, "5", actor=ACTOR)
    shutil.rmtree(refs["4"].directory)
    with pytest.raises(PromotionRefused, match=r"checkpoint directory .* is missing"):
        promotion.promote(reg, "4", actor=ACTOR)
    with pytest.raises(PromotionError, match="has no version 99"):
        promotion.promote(reg, "99", actor=ACTOR)
    _consistent(reg)
    assert promotion.history(reg) == []


def test_force_needs_reason_and_is_recorded(world):
    reg, refs = world
    promotion.promote(reg, "2", actor=ACTOR)
    with pytest.raises(PromotionError, match="force needs a non-empty reason"):
        promotion.promote(reg, "3", force=True, actor=ACTOR)
    with pytest.raises(PromotionError, match="force needs a non-empty reason"):
        promotion.promote(reg, "3", force=True, reason="  ", actor=ACTOR)
    entry = promotion.promote(reg, "3", force=True, reason="hotfix: gate flaky on zh suite", actor=ACTOR)
    assert entry["action"] == "force-promote" and entry["forced"] is True
    assert entry["reason"] == "hotfix: gate flaky on zh suite"
    assert entry["overridden"] and "rejected" in entry["overridden"][0]
    assert reg.alias(PRODUCTION_ALIAS) == "3"
    # a forced promote of a passing, intact version overrides nothing
    (refs["5"].directory / "extra.bin").write_bytes(b"x")
    entry = promotion.promote(reg, "5", force=True, reason="accept re-saved checkpoint", actor=ACTOR)
    assert any("altered" in p for p in entry["overridden"])
    assert [e["action"] for e in _consistent(reg)] == ["promote", "force-promote", "force-promote"]


def test_promote_by_stage_name_and_already_production(world):
    reg, _ = world
    assert promotion.promote(reg, "reasoning_rl", actor=ACTOR)["to"] == "2"
    assert promotion.promote(reg, "candidate-mode_fusion_sft", actor=ACTOR)["to"] == "4"  # 3 failed: 4 is the candidate
    with pytest.raises(PromotionError, match="already production"):
        promotion.promote(reg, "mode_fusion_sft", actor=ACTOR)
    with pytest.raises(PromotionError, match="alias 'candidate-distillation' is not set"):
        promotion.promote(reg, "distillation", actor=ACTOR)
    _consistent(reg)


def test_history_entries_are_complete(world):
    reg, _ = world
    promotion.promote(reg, "1", reason="first", actor=ACTOR)
    promotion.promote(reg, "2", actor="flow-run:1234")
    promotion.rollback(reg, reason="regression in prod", actor=ACTOR)
    entries = _consistent(reg)
    keys = {"id", "model", "action", "from", "to", "at", "actor", "reason", "stage", "digest", "forced", "overridden"}
    for e in entries:
        assert keys <= set(e), e
        at = datetime.fromisoformat(e["at"])
        assert at.tzinfo is not None and at.utcoffset().total_seconds() == 0
        assert abs((datetime.now(timezone.utc) - at).total_seconds()) < 120
        assert e["model"] == MODEL and e["digest"] == reg.get(e["to"])["tags"]["digest"]
    assert [(e["action"], e["from"], e["to"]) for e in entries] == [
        ("promote", None, "1"), ("promote", "1", "2"), ("rollback", "2", "1")]
    assert entries[0]["actor"] == entries[2]["actor"] == ACTOR  # as the caller named it
    assert entries[1]["actor"] == "flow-run:1234"
    assert entries[0]["reason"] == "first" and entries[1]["reason"] is None
    # the file is plain JSON lines, one entry per line
    lines = promotion.history_path(reg).read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [e["id"] for e in entries]


def test_rollback_previous_then_named(world):
    reg, _ = world
    with pytest.raises(PromotionError, match="no production version to roll back"):
        promotion.rollback(reg, actor=ACTOR)
    for v in ("1", "2", "4"):
        promotion.promote(reg, v, actor=ACTOR)
    assert promotion.previous_production(reg) == "2"
    assert promotion.rollback(reg, actor=ACTOR)["to"] == "2"
    assert promotion.rollback(reg, actor=ACTOR)["to"] == "1"          # a stack: twice back is two promotions back
    with pytest.raises(PromotionError, match="no earlier production version"):
        promotion.rollback(reg, actor=ACTOR)
    assert promotion.rollback(reg, to="4", reason="4 was fine after all", actor=ACTOR)["to"] == "4"
    with pytest.raises(PromotionRefused, match="rejected"):
        promotion.rollback(reg, to="3", actor=ACTOR)                 # same checks as promote
    e = promotion.rollback(reg, to="3", force=True, reason="drill", auto=True, actor=ACTOR)
    assert (e["action"], e["forced"]) == ("auto-rollback", True)
    entries = _consistent(reg)
    assert [(e["action"], e["to"]) for e in entries] == [
        ("promote", "1"), ("promote", "2"), ("promote", "4"), ("rollback", "2"), ("rollback", "1"),
        ("rollback", "4"), ("auto-rollback", "3")]


# ---------------------------------------------------------------------------------- concurrency


def _worker(root: str, ops: list, barrier, out: str, env: dict | None = None) -> None:
    """Runs in a spawned process: its own Registry on the same files."""
    os.environ.update(env or {})
    from posttrain.registry import promotion as p
    from posttrain.registry.model_registry import Registry as R

    reg = R(Path(root), model_name=MODEL)
    if barrier is not None:
        barrier.wait(timeout=60)
    done, refused = [], []
    for op, arg in ops:
        try:
            entry = p.promote(reg, arg, actor=ACTOR) if op == "promote" else p.rollback(reg, to=arg, actor=ACTOR)
            done.append(entry["id"])
        except p.PromotionError as exc:
            refused.append(str(exc))
    Path(out).write_text(json.dumps({"done": done, "refused": refused}))


def _run_parallel(reg: Registry, tmp_path: Path, plans: list[list]) -> list[dict]:
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters: no SQLite handle crosses a fork
    barrier = ctx.Barrier(len(plans))
    procs, outs = [], []
    for i, ops in enumerate(plans):
        out = tmp_path / f"worker{i}.json"
        outs.append(out)
        procs.append(ctx.Process(target=_worker, args=(str(reg.root), ops, barrier, str(out))))
    for p in procs:
        p.start()
    for p in procs:
        p.join(90)
        assert p.exitcode == 0, f"worker exit code {p.exitcode}"
    return [json.loads(o.read_text()) for o in outs]


@pytest.mark.slow   # processes racing or killed mid-move (10-16 s): make test-all and CI run it
def test_concurrent_promotes_and_rollbacks_never_interleave(world, tmp_path):
    reg, _ = world
    promotion.promote(reg, "1", actor=ACTOR)
    plans = [
        [("promote", v) for v in ("2", "4") * 5],             # process A: promotes
        [("promote", v) for v in ("5", "1") * 3] + [("rollback", None)] * 4,  # B: promotes, then races rollbacks
    ]
    results = _run_parallel(reg, tmp_path, plans)
    entries = _consistent(reg)
    done = [i for r in results for i in r["done"]]
    assert len(done) == len(set(done))                        # nothing duplicated
    assert sorted(done) == sorted(e["id"] for e in entries[1:])  # nothing lost
    assert len(done) >= 5                                     # real contention, mostly successful moves
    owner = {i: w for w, r in enumerate(results) for i in r["done"]}
    turns = [owner[e["id"]] for e in entries[1:]]
    assert sum(a != b for a, b in zip(turns, turns[1:])) >= 1, turns  # the two processes took turns
    for r in results:  # refusals are clean "already production"/"no earlier" errors, never corruption
        assert all(re.search(r"already production|no earlier production version", m) for m in r["refused"]), r


def test_lock_timeout_while_another_holds_it(world):
    reg, _ = world
    with promotion._locked(reg, None):  # a second open file description: conflicts like another process
        with pytest.raises(promotion.LockTimeout, match="another promotion/rollback holds"):
            promotion.promote(reg, "1", timeout=0.2, actor=ACTOR)
    assert promotion.promote(reg, "1", actor=ACTOR)["to"] == "1"


# ---------------------------------------------------------------------------------- crash safety


def test_exception_mid_move_keeps_previous_state(world, monkeypatch):
    reg, _ = world
    promotion.promote(reg, "1", actor=ACTOR)
    for point in ("after-intent", "after-alias"):
        monkeypatch.setenv(promotion.FAULT_ENV, point)
        with pytest.raises(promotion.SimulatedCrash):
            promotion.promote(reg, "2", actor=ACTOR)
        monkeypatch.delenv(promotion.FAULT_ENV)
        entries = _consistent(reg)
        assert [e["to"] for e in entries] == ["1"] and reg.alias(PRODUCTION_ALIAS) == "1"
    assert promotion.promote(reg, "2", actor=ACTOR)["from"] == "1"
    _consistent(reg)


def _crash_in_child(reg: Registry, tmp_path: Path, point: str, version: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=_worker, args=(str(reg.root), [("promote", version)], None, str(tmp_path / "crash.json"),
                                          {promotion.FAULT_ENV: f"{point}:exit"}))
    p.start()
    p.join(90)
    assert p.exitcode == 99  # died like kill -9: no except/finally ran


@pytest.mark.slow   # processes racing or killed mid-move (10-16 s): make test-all and CI run it
def test_kill_between_alias_move_and_commit_is_reconciled(world, tmp_path):
    reg, _ = world
    promotion.promote(reg, "1", actor=ACTOR)
    _crash_in_child(reg, tmp_path, "after-alias", "2")
    # the dead process left the alias moved and its intent behind, but nothing committed
    assert reg.alias(PRODUCTION_ALIAS) == "2"
    assert promotion.intent_path(reg).exists()
    assert promotion.current_production(reg) == "1"
    assert [e["to"] for e in promotion.history(reg)] == ["1"]
    notes = promotion.reconcile(reg)
    assert any("was not committed: rolled back" in n for n in notes), notes
    assert [e["to"] for e in _consistent(reg)] == ["1"]
    assert promotion.reconcile(reg) == []  # idempotent
    # the next operation just works (and would have reconciled by itself)
    _crash_in_child(reg, tmp_path, "after-alias", "4")
    assert promotion.promote(reg, "2", actor=ACTOR)["from"] == "1"
    assert [e["to"] for e in _consistent(reg)] == ["1", "2"]


@pytest.mark.slow   # processes racing or killed mid-move (10-16 s): make test-all and CI run it
def test_kill_after_commit_keeps_the_move(world, tmp_path):
    reg, _ = world
    promotion.promote(reg, "1", actor=ACTOR)
    _crash_in_child(reg, tmp_path, "after-commit", "2")
    assert promotion.intent_path(reg).exists()
    assert promotion.current_production(reg) == "2"
    notes = promotion.reconcile(reg)
    assert any("was committed" in n for n in notes), notes
    assert [e["to"] for e in _consistent(reg)] == ["1", "2"]


def test_torn_history_line_is_not_committed(world):
    reg, _ = world
    promotion.promote(reg, "1", actor=ACTOR)
    reg.set_alias(PRODUCTION_ALIAS, "2")  # as if the crash came after the alias move
    with open(promotion.history_path(reg), "ab") as f:
        f.write(b'{"id": "torn", "model": "posttrain-ops", "action": "promote", "from": "1", "t')
    assert [e["to"] for e in promotion.history(reg)] == ["1"]  # readers skip it
    notes = promotion.reconcile(reg)
    assert any("torn" in n for n in notes) and any("outside the recorded history" in n for n in notes)
    assert promotion.history_path(reg).read_bytes().endswith(b"\n")
    assert [e["to"] for e in _consistent(reg)] == ["1"]


def test_alias_moved_by_hand_is_put_back(world):
    reg, _ = world
    promotion.promote(reg, "2", actor=ACTOR)
    reg.set_alias(PRODUCTION_ALIAS, "5")
    assert promotion.promote(reg, "4", actor=ACTOR)["from"] == "2"  # history, not the alias, is the truth
    _consistent(reg)


# ---------------------------------------------------------------------------------- lineage


def test_lineage_back_to_base_from_registry_tags(world):
    reg, refs = world
    chain = lineage(reg, "5")
    assert [(c["version"], c["stage"]) for c in chain] == [
        ("5", "general_rl"), ("4", "mode_fusion_sft"), ("2", "reasoning_rl"), ("1", "cold_start_sft"), ("base", "base")]
    v4 = chain[1]
    assert v4["flow_run"] == "run-b" and v4["config_hash"] == "cfgb" and v4["code_revision"] == "revb"
    assert v4["seed"] == "0" and v4["gate"] == "passed" and v4["verifiers"] == {"math": "math-verifier/1"}
    assert v4["digest"] == refs["4"].digest and v4["parent_version"] == "2"
    assert v4["datasets_produced"] == {"fusion_mix.jsonl": "md5-mix-4"}
    assert v4["datasets_consumed"] == {"math_train": "md5-math", "rejection_sampled.jsonl": "md5-rs"}
    assert chain[0]["datasets_produced"] == {}
    v2 = chain[2]  # registered before the datasets_produced tag: everything counts as consumed, produced unknown
    assert v2["datasets_produced"] is None and v2["datasets_consumed"] == {"math_train": "md5-math"}
    assert chain[-1]["digest"] == BASE_DIGEST
    assert [c["version"] for c in lineage(reg, "mode_fusion_sft")][:1] == ["4"]  # via its candidate
    v3 = lineage(reg, "3")[0]
    assert v3["gate"] == "failed"
    # before the tag, `datasets` held what the stage produced too: listed as consumed, as recorded
    assert v3["datasets_produced"] is None and v3["datasets_consumed"]["fusion_mix.jsonl"] == "md5-mix-3"


def test_compare_uses_paired_intervals():
    from posttrain.schema import EvalResult

    old = EvalResult(metrics={"math/accuracy": 0.2, "math/len_correct": 30.0},
                     per_item={"math/accuracy": [0.0] * 80 + [1.0] * 20})
    new = EvalResult(metrics={"math/accuracy": 0.6, "math/len_correct": 25.0},
                     per_item={"math/accuracy": [0.0] * 40 + [1.0] * 60})
    rows = {r["metric"]: r for r in compare(new, old, 0.95)}
    assert rows["math/accuracy"]["verdict"] == "better" and rows["math/accuracy"]["low"] > 0
    assert rows["math/len_correct"]["verdict"] is None and rows["math/len_correct"]["diff"] == -5.0
    assert compare(old, new, 0.95)[0]["verdict"] == "worse"
