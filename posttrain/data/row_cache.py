"""Normalised rows cached by content. A source's rows after reading, column mapping, transforms
and the per-row checks are kept under `<paths.runs>/cache/normalised/`, keyed on the role, the
source's settings (its `weight` aside: mixing comes after), the content hash of what it reads and
the code that normalises (every module of the posttrain package, and the versions of the libraries
that read files). A second `data check` or run on the same data reads them back instead of
normalising again; a change to the data, the settings or the code misses. A cached file that is cut
short or unreadable is a miss, and deleting the folder is always safe.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


@dataclass
class NormalisedSource:
    rows: list[dict]
    wheres: list[str]                 # where each row was read (file:line or file row N)
    notes: list[str] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    read: int = 0                     # rows read before `drop:`
    content_hash: str = ""
    cached: bool = False


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """Every module of the package, and the reading libraries' versions: any change misses."""
    import datasets
    import pyarrow

    package = Path(__file__).resolve().parents[1]
    digest = hashlib.md5(f"{datasets.__version__} {pyarrow.__version__} {sys.version_info[:2]}".encode())
    for file in sorted(package.rglob("*.py")):
        digest.update(f"{file.relative_to(package)}\0".encode())
        digest.update(hashlib.md5(file.read_bytes()).digest())
    return digest.hexdigest()


def cache_key(role: str, settings: str, root: Path, content_hash: str) -> str:
    return hashlib.md5(json.dumps([role, settings, str(root), content_hash, code_version()]).encode()).hexdigest()


def normalised(role: str, settings: str, root: Path, content_hash: str, folder: Path | None,
               compute: Callable[[], NormalisedSource]) -> NormalisedSource:
    """The source's normalised rows from `folder` when they are there under this key, else computed
    and stored (no folder: computed, nothing kept)."""
    if folder is None:
        return _with_hash(compute(), content_hash)
    path = folder / f"{cache_key(role, settings, root, content_hash)}.jsonl"
    hit = _load(path)
    if hit is not None:
        return _with_hash(hit, content_hash)
    result = _with_hash(compute(), content_hash)
    _store(path, result)
    return result


def _with_hash(result: NormalisedSource, content_hash: str) -> NormalisedSource:
    result.content_hash = content_hash
    return result


def _load(path: Path) -> NormalisedSource | None:
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.loads(f.readline())
            pairs = [json.loads(line) for line in f]
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("rows") != len(pairs):
        return None
    return NormalisedSource([row for _, row in pairs], [where for where, _ in pairs], meta["notes"], meta["dropped"],
                            meta["read"], cached=True)


def _store(path: Path, result: NormalisedSource) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}")
    meta = {"rows": len(result.rows), "notes": result.notes, "dropped": result.dropped, "read": result.read}
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(meta, ensure_ascii=False) + "\n")
            for where, row in zip(result.wheres, result.rows):
                f.write(json.dumps([where, row], ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):   # a full disk or an unserialisable value: no cache, no failure
        tmp.unlink(missing_ok=True)
