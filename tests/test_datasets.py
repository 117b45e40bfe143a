"""DatasetStore against real git + DVC in tmp_path (no mocks)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from posttrain.data.store import DatasetMissingError, DatasetStore
from posttrain.schema import DatasetRef


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def _write_jsonl(path: Path, rows: int, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for i in range(rows):
            f.write(json.dumps({"id": i, "seed": seed, "prompt": f"q{i}", "text": "x" * 90}) + "\n")
    return path


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _cache_object(store: DatasetStore, md5: str) -> Path:
    return store.root / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]


def _remote_object(store: DatasetStore, md5: str) -> Path:
    return store.remote / "files" / "md5" / md5[:2] / md5[2:]


@pytest.fixture
def store(tmp_path):
    # the "user checkout" is itself a git repo: the store must never commit into it
    _git(tmp_path, "init", "-q")
    return DatasetStore(tmp_path / "runs" / "data-store")


def test_track_file_md5_is_dvcs_and_restore_is_bit_identical(store, tmp_path):
    src = _write_jsonl(tmp_path / "out" / "sft.jsonl", rows=10_000)  # ~1.1 MB
    assert src.stat().st_size > 1_000_000
    ref = store.track(src, "rejection_sampling/sft.jsonl", rows=10_000)   # its speed: bench/dataset_store.py

    assert ref == DatasetRef(name="rejection_sampling/sft.jsonl",
                             path="datasets/rejection_sampling/sft.jsonl",
                             md5=ref.md5, rows=10_000)
    # DVC 3 "md5" of a file is the plain md5 of its bytes; DVC's own .dvc file agrees
    assert ref.md5 == _md5(src)
    dvcfile = (store.root / ref.path).with_name("sft.jsonl.dvc").read_text()
    assert f"md5: {ref.md5}" in dvcfile and "hash: md5" in dvcfile
    assert _remote_object(store, ref.md5).read_bytes() == src.read_bytes()  # pushed

    # committed in the store's own git repo, working tree clean; the outer checkout untouched
    assert "track rejection_sampling/sft.jsonl" in _git(store.root, "log", "--format=%s")
    assert _git(store.root, "status", "--porcelain") == ""
    assert _git(store.root, "rev-parse", "--show-toplevel").strip() == str(store.root)
    assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path,
                          capture_output=True).returncode != 0  # no commit in the user repo
    assert _git(store.root, "config", "--local", "user.email").strip()
    cfg = (store.root / ".dvc" / "config").read_text()
    assert "analytics = False" in cfg and "check_update = False" in cfg
    assert "autostage = True" in cfg

    # local copy deleted -> restored bit-identical
    local = store.root / ref.path
    local.unlink()
    assert store.restore(ref) == local
    assert local.read_bytes() == src.read_bytes()
    assert store.read_text(ref) == src.read_text()

    # local copy AND local cache gone -> fetched from the remote
    local.unlink()
    shutil.rmtree(store.root / ".dvc" / "cache")
    assert _md5(store.restore(ref)) == ref.md5


def test_altered_copy_is_restored(store, tmp_path):
    src = _write_jsonl(tmp_path / "a.jsonl", rows=200)
    ref = store.track(src, "a.jsonl")
    local = store.root / ref.path
    local.write_text(local.read_text().replace('"q7"', '"q8"'))  # same size, new bytes
    assert _md5(local) != ref.md5
    store.restore(ref)
    assert local.read_bytes() == src.read_bytes()
    # an intact copy is left alone
    mtime = local.stat().st_mtime_ns
    store.restore(ref)
    assert local.stat().st_mtime_ns == mtime


def test_directory_dataset_round_trip(store, tmp_path):
    src = tmp_path / "shards"
    _write_jsonl(src / "part-0.jsonl", 50, seed=0)
    _write_jsonl(src / "nested" / "part-1.jsonl", 50, seed=1)
    ref = store.track(src, "distill/shards")
    assert ref.md5.endswith(".dir") and ref.path == "datasets/distill/shards"
    local = store.root / ref.path
    assert _tree(local) == _tree(src)

    (local / "part-0.jsonl").write_text("tampered\n")
    (local / "extra.jsonl").write_text("{}\n")
    shutil.rmtree(local / "nested")
    store.restore(ref)
    assert _tree(local) == _tree(src)

    shutil.rmtree(local)
    store.restore(ref)
    assert _tree(local) == _tree(src)
    with pytest.raises(IsADirectoryError):
        store.read_text(ref)


def test_older_version_of_a_retracked_name_is_restorable(store, tmp_path):
    v1 = store.track(_write_jsonl(tmp_path / "v1.jsonl", 100, seed=1), "rs/data.jsonl")
    v2 = store.track(_write_jsonl(tmp_path / "v2.jsonl", 100, seed=2), "rs/data.jsonl")
    assert v1.path == v2.path and v1.md5 != v2.md5
    assert store.read_text(v1) == (tmp_path / "v1.jsonl").read_text()
    assert store.read_text(v2) == (tmp_path / "v2.jsonl").read_text()
    # re-tracking identical content is a no-op commit-wise
    n = len(_git(store.root, "log", "--format=%H").split())
    assert store.track(tmp_path / "v2.jsonl", "rs/data.jsonl").md5 == v2.md5
    assert len(_git(store.root, "log", "--format=%H").split()) == n


def test_missing_from_remote_is_a_clear_error(store, tmp_path):
    ref = store.track(_write_jsonl(tmp_path / "gone.jsonl", 10), "gone.jsonl")
    (store.root / ref.path).unlink()
    _cache_object(store, ref.md5).unlink()
    _remote_object(store, ref.md5).unlink()
    with pytest.raises(DatasetMissingError) as err:
        store.restore(ref)
    assert "'gone.jsonl'" in str(err.value) and ref.md5 in str(err.value)
    assert str(store.remote) in str(err.value)

    ghost = DatasetRef(name="ghost", path="datasets/ghost.jsonl", md5="0" * 32)
    with pytest.raises(DatasetMissingError, match="ghost.*0{32}"):
        store.restore(ghost)


def test_reopen_is_idempotent_and_names_are_checked(store, tmp_path):
    head = _git(store.root, "rev-parse", "HEAD")
    again = DatasetStore(store.root)
    assert again.remote == store.remote == tmp_path / "runs" / "dvc-remote"
    assert _git(store.root, "rev-parse", "HEAD") == head
    custom = DatasetStore(tmp_path / "other-store", tmp_path / "elsewhere")
    assert DatasetStore(custom.root).remote == tmp_path / "elsewhere"  # kept on reopen
    src = _write_jsonl(tmp_path / "x.jsonl", 1)
    for bad in ("", "/abs.jsonl", "../escape.jsonl", "a/../../b", "x.dvc"):
        with pytest.raises(ValueError):
            store.track(src, bad)
    with pytest.raises(FileNotFoundError):
        store.track(tmp_path / "nope.jsonl", "nope.jsonl")


def test_concurrent_track_from_two_processes(tmp_path):
    root, remote = tmp_path / "store", tmp_path / "remote"
    DatasetStore(root, remote)  # init once; the workers reopen it
    script = textwrap.dedent(
        """
        import json, sys, time
        from pathlib import Path
        from posttrain.data.store import DatasetStore
        root, remote, tag, src_dir = sys.argv[1:5]
        store = DatasetStore(Path(root), Path(remote))
        (Path(src_dir) / f"ready-{tag}").touch()
        while not (Path(src_dir) / "go").exists():  # start both writers together
            time.sleep(0.01)
        refs = []
        for i in range(3):
            src = Path(src_dir) / f"{tag}-{i}.jsonl"
            src.write_text("".join(json.dumps({"w": tag, "i": i, "k": k}) + "\\n"
                                   for k in range(500)))
            refs.append(store.track(src, f"{tag}/part-{i}.jsonl").model_dump())
        print(json.dumps(refs))
        """
    )
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "HF_HUB_OFFLINE": "1"}
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(root), str(remote), tag, str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for tag in ("w0", "w1")
    ]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{t}").exists() for t in ("w0", "w1")):
        for p in procs:
            if p.poll() is not None:
                pytest.fail(f"worker exited early: {p.communicate()[1]}")
        assert time.monotonic() < deadline, "workers never became ready"
        time.sleep(0.02)
    (tmp_path / "go").touch()
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    refs = [DatasetRef(**r) for out, _ in outs for r in json.loads(out)]
    assert len(refs) == 6

    store = DatasetStore(root, remote)
    assert _git(root, "status", "--porcelain") == ""
    subjects = _git(root, "log", "--format=%s").splitlines()
    assert sum(s.startswith("track ") for s in subjects) == 6
    subprocess.run(["git", "fsck", "--no-progress"], cwd=root, check=True, capture_output=True)
    for ref in refs:
        (root / ref.path).unlink()
        assert _md5(store.restore(ref)) == ref.md5
        assert _remote_object(store, ref.md5).exists()


# ---------------------------------------------------------------------------------- stale locks
# A run killed during `dvc add` / `git commit` in the store leaves their lock files behind.


def test_a_killed_calls_stale_git_lock_is_removed_and_the_next_track_works(store, tmp_path, monkeypatch, caplog):
    first = store.track(_write_jsonl(tmp_path / "a.jsonl", rows=20), "a.jsonl")
    index_lock = store.root / ".git" / "index.lock"
    index_lock.write_text("")  # what a kill -9 during `git add`/`git commit` (or DVC's autostage) leaves
    refused = subprocess.run(["git", "add", "-A"], cwd=store.root, capture_output=True, text=True)
    assert refused.returncode != 0 and "index.lock': File exists" in refused.stderr  # git alone: blocked

    # Without the clean-up every later track fails: DVC's autostage cannot take the index lock.
    from dulwich.file import FileLocked

    monkeypatch.setattr(DatasetStore, "_clear_stale_locks", lambda self: None)
    with pytest.raises(FileLocked):
        store.track(_write_jsonl(tmp_path / "b.jsonl", rows=20, seed=1), "b.jsonl")
    monkeypatch.undo()

    with caplog.at_level("WARNING", logger="posttrain.data.store"):
        ref = store.track(_write_jsonl(tmp_path / "b.jsonl", rows=20, seed=2), "b.jsonl")
    assert not index_lock.exists()
    assert any("removed .git/index.lock" in r.getMessage() for r in caplog.records), caplog.text
    assert f"track b.jsonl md5={ref.md5}" in _git(store.root, "log", "--format=%s")
    assert _git(store.root, "status", "--porcelain") == ""
    (store.root / first.path).unlink()
    assert _md5(store.restore(first)) == first.md5


def test_a_stale_dvc_rwlock_entry_is_removed_but_dvcs_flock_file_is_left(store, tmp_path, monkeypatch):
    store.track(_write_jsonl(tmp_path / "a.jsonl", rows=20), "a.jsonl")
    rwlock = store.root / ".dvc" / "tmp" / "rwlock"
    target = str(store.root / "datasets" / "a.jsonl")
    # A killed `dvc add` whose pid now names another live process (here: this one): DVC drops dead
    # pids from rwlock itself, but not a live one.
    rwlock.write_text(json.dumps({"write": {target: {"pid": os.getpid(), "cmd": "dvc add"}}}))
    repo_lock = store.root / ".dvc" / "tmp" / "lock"
    repo_lock.write_text("4242\n")  # an flock: harmless once its holder is dead, hence left alone

    from dvc.lock import LockError

    monkeypatch.setattr(DatasetStore, "_clear_stale_locks", lambda self: None)
    with pytest.raises(LockError, match="is busy"):
        store.track(_write_jsonl(tmp_path / "a.jsonl", rows=20, seed=1), "a.jsonl")
    monkeypatch.undo()

    ref = store.track(_write_jsonl(tmp_path / "a.jsonl", rows=20, seed=2), "a.jsonl")
    assert _md5(store.root / ref.path) == ref.md5
    assert "dvc add" not in (rwlock.read_text() if rwlock.exists() else "")
    assert repo_lock.exists()


def test_a_dataset_whose_track_was_killed_before_its_commit_gets_its_own_lineage_commit(store, tmp_path):
    """Killed between `dvc add` (which stages the .dvc file) and the commit: the next call on the
    store commits that dataset under its own name, pushed, instead of folding it into another commit."""
    from dvc.repo import Repo

    store.track(_write_jsonl(tmp_path / "a.jsonl", rows=20), "a.jsonl")
    dest = store.root / "datasets" / "b.jsonl"
    shutil.copyfile(_write_jsonl(tmp_path / "b.jsonl", rows=20, seed=1), dest)
    with Repo(str(store.root)) as repo:   # what track did before the kill: add, no push, no commit
        repo.add(str(dest))
    b_md5 = yaml.safe_load((store.root / "datasets" / "b.jsonl.dvc").read_text())["outs"][0]["md5"]

    reopened = DatasetStore(store.root)
    c = reopened.track(_write_jsonl(tmp_path / "c.jsonl", rows=20, seed=2), "c.jsonl")
    subjects = _git(store.root, "log", "--format=%s").splitlines()
    assert subjects[0] == f"track c.jsonl md5={c.md5}"
    assert any(s.startswith(f"track b.jsonl md5={b_md5}") for s in subjects), subjects
    files_in_c = _git(store.root, "show", "--name-only", "--format=", "HEAD").split()
    assert files_in_c and all("b.jsonl" not in f for f in files_in_c), files_in_c
    assert _git(store.root, "status", "--porcelain") == ""
    assert _remote_object(store, b_md5).exists()   # pushed on recovery: restorable from the remote
