"""A checkpoint is hashed once, when it is saved: its manifest of per-file hashes lets a cache hit
check names, sizes and modification times instead of reading every byte, and an altered, added or
removed file still changes the digest."""
from __future__ import annotations

import os

import pytest

from posttrain.registry import checkpoint as ck
from posttrain.schema import CheckpointRef


@pytest.fixture
def sealed(tmp_path):
    d = tmp_path / "ckpt"
    (d / "sub").mkdir(parents=True)
    (d / "model.safetensors").write_bytes(os.urandom(1 << 16))
    (d / "config.json").write_text('{"a": 1}')
    (d / "sub" / "tok.json").write_text("{}")
    return d, ck.seal(d)


def _count_hashing(monkeypatch) -> list:
    hashed = []
    real = ck._file_sha256
    monkeypatch.setattr(ck, "_file_sha256", lambda f: hashed.append(f.name) or real(f))
    return hashed


def test_a_sealed_checkpoint_is_checked_without_rehashing(sealed, monkeypatch):
    d, digest = sealed
    assert (d / ck.MANIFEST).is_file()
    hashed = _count_hashing(monkeypatch)
    assert ck.is_intact(CheckpointRef(path=str(d), digest=digest))
    assert hashed == []


def test_the_digest_does_not_depend_on_the_manifest(sealed):
    d, digest = sealed
    (d / ck.MANIFEST).unlink()
    assert ck.directory_digest(d) == digest


@pytest.mark.parametrize("change", ["same_size_edit", "resize", "new_file", "removed_file", "renamed_file"])
def test_an_altered_checkpoint_gets_another_digest(sealed, change, monkeypatch):
    d, digest = sealed
    weights = d / "model.safetensors"
    if change == "same_size_edit":   # same size, new mtime: the file is rehashed
        data = bytearray(weights.read_bytes())
        data[100] ^= 0xFF
        weights.write_bytes(bytes(data))
        os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 1_000_000))
    elif change == "resize":
        weights.write_bytes(weights.read_bytes() + b"x")
    elif change == "new_file":
        (d / "extra.bin").write_bytes(b"1")
    elif change == "removed_file":
        (d / "sub" / "tok.json").unlink()
    else:
        (d / "config.json").rename(d / "config2.json")
    hashed = _count_hashing(monkeypatch)
    assert not ck.is_intact(CheckpointRef(path=str(d), digest=digest))
    assert set(hashed) <= {"model.safetensors", "extra.bin", "config2.json"}  # only what changed is read


def test_a_foreign_directory_keeps_its_manifest_outside(tmp_path, monkeypatch):
    base = tmp_path / "base"
    base.mkdir()
    (base / "w.bin").write_bytes(os.urandom(4096))
    manifests = tmp_path / "runs" / "manifests"
    first = ck.foreign_digest(base, manifests)
    assert not (base / ck.MANIFEST).exists() and len(list(manifests.iterdir())) == 1
    hashed = _count_hashing(monkeypatch)
    assert ck.foreign_digest(base, manifests) == first and hashed == []
    (base / "w.bin").write_bytes(os.urandom(4096))
    assert ck.foreign_digest(base, manifests) != first and hashed == ["w.bin"]


def test_a_corrupt_manifest_is_ignored(sealed):
    d, digest = sealed
    (d / ck.MANIFEST).write_text("{not json")
    assert ck.directory_digest(d) == digest
