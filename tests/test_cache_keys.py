"""What a stage's cache key holds: a reward fix, a library upgrade or uncommitted code reruns the
stages it affects instead of silently reusing results paid for by the old code."""
import pytest

from posttrain.config.pipeline import PipelineConfig
from posttrain.schema import CheckpointRef, DatasetRef, StageInputs


def _parameters(**inputs):
    base = dict(work_dir="/tmp/w", parent=CheckpointRef(path="/tmp/p", digest="sha256:p"),
                data={"reasoning_prompts": DatasetRef(name="reasoning_prompts", path="/tmp/r", md5="r1")})
    return {"name": "reasoning_rl", "config": PipelineConfig(), "inputs": StageInputs(**{**base, **inputs})}


@pytest.fixture
def key(monkeypatch):
    import flows.tasks as pipeline

    monkeypatch.setattr(pipeline, "code_state", lambda: {"revision": "abc", "dirty": None})
    return lambda **inputs: pipeline.stage_cache_key(None, _parameters(**inputs))


def test_the_key_follows_the_stage_inputs_and_not_the_run(key):
    assert key() == key()
    assert key() != key(data={"reasoning_prompts": DatasetRef(name="reasoning_prompts", path="/tmp/r", md5="r2")})
    assert key() == key(work_dir="/tmp/another-run")


def test_a_reward_fix_or_a_library_upgrade_changes_the_key(key, monkeypatch):
    import flows.tasks as pipeline
    import posttrain.rewards as rewards

    before = key()
    monkeypatch.setitem(rewards.VERIFIER_VERSIONS, "math", "math-verifier/999")
    assert key() != before
    monkeypatch.undo()
    monkeypatch.setattr(pipeline, "code_state", lambda: {"revision": "abc", "dirty": None})
    monkeypatch.setattr(pipeline, "_library_versions", lambda: {"trl": "0.0.1", "transformers": "1", "torch": "1"})
    assert key() != before


def test_uncommitted_code_keys_the_cache_on_its_diff(key, monkeypatch):
    import flows.tasks as pipeline

    clean = key()
    monkeypatch.setattr(pipeline, "code_state", lambda: {"revision": "abc", "dirty": "d1"})
    dirty = key()
    monkeypatch.setattr(pipeline, "code_state", lambda: {"revision": "abc", "dirty": "d2"})
    assert len({clean, dirty, key()}) == 3


def test_code_state_sees_edits_and_new_files_under_the_code_folders(tmp_path, monkeypatch):
    import subprocess

    import flows.tasks as pipeline

    for args in (["init", "-q"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True)
    (tmp_path / "posttrain").mkdir()
    (tmp_path / "posttrain" / "a.py").write_text("x = 1\n")
    (tmp_path / "README.md").write_text("hi\n")
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    subprocess.run(["git", "commit", "-qm", "c"], cwd=tmp_path, check=True)
    monkeypatch.setattr(pipeline, "PROJECT_ROOT", tmp_path)
    states = []
    for change in (None, ("README.md", "docs only\n"), ("posttrain/a.py", "x = 2\n"), ("stages/new.py", "y = 1\n")):
        if change:
            (tmp_path / change[0]).parent.mkdir(exist_ok=True)
            (tmp_path / change[0]).write_text(change[1])
        pipeline.code_state.cache_clear()
        states.append(pipeline.code_state()["dirty"])
    pipeline.code_state.cache_clear()
    assert states[0] is None and states[1] is None        # clean, and a change outside the code folders
    assert states[2] and states[3] and states[2] != states[3]


def test_a_users_environment_with_a_new_version_reruns_the_stages_and_evaluations_it_ran_in(key, tmp_path, monkeypatch):
    import json
    import sys

    import flows.tasks as pipeline

    (tmp_path / "key_envs.py").write_text(
        "class Lockers:\n    version = 'lockers/1'\n    def reset(self, **kw): pass\n    def state(self): return {}\n"
        "    def open_locker(self, number: int) -> str:\n        '''Open one.\n\n        Args:\n            number: Which.\n        '''\n        return '1'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = tmp_path / "prompts.jsonl"
    rows.write_text(json.dumps({"kind": "tool", "environment": "key_envs:Lockers", "prompt": "open 1"}) + "\n")
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"kind": "math", "prompt": "1+1"}) + "\n")

    def refs(path):
        return {"general_prompts": DatasetRef(name="general_prompts", path=str(path), md5="same")}

    def eval_key(path):
        return pipeline.eval_cache_key(None, {"config": PipelineConfig(), "label": "general_rl", "suites": refs(path),
                                              "checkpoint": CheckpointRef(path="/tmp/c", digest="sha256:c")})

    before, before_eval = key(data=refs(rows)), eval_key(rows)
    assert key(data=refs(plain)) == key(data=refs(tmp_path / "elsewhere.jsonl"))   # no environment, no key part
    monkeypatch.setattr(sys.modules["key_envs"].Lockers, "version", "lockers/2")
    assert key(data=refs(rows)) != before and eval_key(rows) != before_eval
