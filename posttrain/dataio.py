"""Plain file I/O for datasets: JSON-lines read/write, content hashes, dataset references.

Shared by the data sources, the stages, the embedded world's builder and the benches; it knows no
data source and no task.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from posttrain.schema import DatasetRef


class DatasetError(ValueError):
    """Bad data: the message names the file, the line or row, and the column where it applies."""


def file_md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def dataset_ref(path: Path, name: str | None = None) -> DatasetRef:
    rows = sum(1 for _ in open(path, encoding="utf-8"))
    return DatasetRef(name=name or path.stem, path=str(path), md5=file_md5(path), rows=rows)


def write_jsonl(rows: list[dict], path: Path) -> None:
    """Write atomically (temp file, then rename): a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def jsonl_rows(path: Path):
    """(line number, row) of each non-blank line; a line that is not UTF-8, not JSON or not an
    object raises DatasetError naming file, line and column."""
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(f"{path}:{line_no}:{exc.start + 1}: not UTF-8 ({exc.reason})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{line_no}:{exc.colno}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}")
            yield line_no, row


def read_jsonl(path: Path, required: tuple[str, ...] = ()) -> list[dict]:
    """Rows of a JSON-lines file; a bad row raises DatasetError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"dataset {path} is missing")
    rows = []
    for line_no, row in jsonl_rows(path):
        missing = [k for k in required if k not in row]
        if missing:
            raise DatasetError(f"{path}:{line_no}: missing column(s) {', '.join(missing)}")
        rows.append(row)
    return rows
