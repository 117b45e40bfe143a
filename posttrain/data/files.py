"""Plain file I/O for datasets: JSON-lines read/write, content hashes, dataset references.

Shared by the data sources, the stages, the embedded world's builder and the benches; it knows no
data source and no task.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from pathlib import Path

from posttrain.schema import DatasetRef


class DatasetError(ValueError):
    """Bad data: the message names the file, the line or row, and the column where it applies."""


def file_md5(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "md5").hexdigest()


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


# What one row of a data file may weigh, unless its source sets `max_row_bytes`: long-CoT traces
# run to tens of KB; a 50 MB row is a broken export, and it would take training past 10 GiB.
MAX_ROW_BYTES = 4 << 20
# Digits of a JSON integer: Python refuses past 4300 with a traceback; no data value needs 1000.
MAX_NUMBER_DIGITS = 1000
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def check_regular(path: Path, what: str = "data source") -> None:
    """Refuse a path that is not a regular file (after symlinks) or a folder of them: a FIFO or a
    device (`/dev/zero` behind a `.jsonl` link) would be read without end."""
    path = Path(path)
    files = [path] if not path.is_dir() else [p for p in path.rglob("*") if not p.is_dir()]
    for file in files:
        try:
            mode = os.stat(file).st_mode
        except OSError as exc:
            raise DatasetError(f"{file}: {what} cannot be read ({exc.strerror})") from None
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
                    else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file")
            link = f" (a link to {os.path.realpath(file)})" if os.path.islink(file) else ""
            raise DatasetError(f"{file}{link}: {what} is {kind}, not a regular file: it cannot be read to its end")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise ValueError(f"a number of {len(text)} digits (at most {MAX_NUMBER_DIGITS})")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON value")


def _surrogate_column(value, column: str | None = None) -> str | None:
    """The column (top-level key) holding a string with a lone UTF-16 surrogate, if any."""
    stack = [(value, column)]
    while stack:
        item, col = stack.pop()
        if isinstance(item, str):
            if any(0xD800 <= ord(ch) <= 0xDFFF for ch in item):
                return col or "?"
        elif isinstance(item, dict):
            stack.extend((v, col or str(k)) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, col) for v in item)
    return None


def parse_json_row(raw: bytes, where: str, *, whole_file: bool = False):
    """One JSON value of a data file, refused with a one-line error naming `where` (file:line) and
    never echoing the content: bad UTF-8 or JSON, nesting deeper than the parser allows, numbers
    too long or out of range, NaN / Infinity, strings holding a lone UTF-16 surrogate. `whole_file`:
    `raw` is a whole file (`where` its name), so a syntax error names its line too."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{where}:{exc.start + 1}: not UTF-8 ({exc.reason})") from None
    try:
        value = json.loads(text, parse_int=_bounded_int, parse_float=_finite_float, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        at = f"{exc.lineno}:{exc.colno}" if whole_file else exc.colno
        raise DatasetError(f"{where}:{at}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise DatasetError(f"{where}: JSON nested too deeply to be a data row") from None
    except ValueError as exc:
        raise DatasetError(f"{where}: {exc}") from None
    if _SURROGATE_ESCAPE.search(raw) and (column := _surrogate_column(value)) is not None:
        raise DatasetError(f"{where}: column {column!r} holds a lone UTF-16 surrogate (\\ud800-\\udfff), "
                           "which is no character: the text was cut or mis-encoded")
    return value


def jsonl_rows(path: Path, max_row_bytes: int = MAX_ROW_BYTES, setting: str = "max_row_bytes"):
    """(line number, row) of each non-blank line; a line that is not UTF-8, not JSON or not an
    object raises DatasetError naming file, line and column (`parse_json_row`). A line longer than
    `max_row_bytes` is refused without being read whole, naming the `setting` that raises it."""
    check_regular(path)
    with open(path, "rb") as f:
        line_no = 0
        while raw := f.readline(max_row_bytes + 1):
            line_no += 1
            if len(raw) > max_row_bytes and not (len(raw) == max_row_bytes + 1 and raw.endswith(b"\n")):
                raise DatasetError(f"{path}:{line_no}: a row of more than {max_row_bytes} bytes; raise `{setting}` "
                                   "if rows this large are meant")
            if not raw.strip():
                continue
            row = parse_json_row(raw, f"{path}:{line_no}")
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
