"""Bounded, safe reading of a user's data: a path that is not a regular file, an oversized row,
deep nesting, lone surrogates and out-of-range numbers are refused with one line naming file and
line, before any work, without reading without end and without echoing the file's content."""
import json
import os

import pytest

from posttrain.data.files import DatasetError
from posttrain.data.sources import SourceConfig, load_role

pytestmark = pytest.mark.timeout(60)
SECRET = "row-content-that-must-not-be-echoed"


def _load(path, **extra):
    source = SourceConfig(path=str(path), kind="math", columns={"q": "prompt", "a": "answer"}, **extra)
    return load_role("reasoning_prompts", [source], path.parent, 0).rows


def _refused(path, **extra) -> str:
    with pytest.raises(DatasetError) as info:
        _load(path, **extra)
    message = str(info.value)
    assert "\n" not in message and SECRET not in message and str(path) in message, message
    return message


def test_a_fifo_is_refused_not_read_without_end(tmp_path):
    fifo = tmp_path / "prompts.jsonl"
    os.mkfifo(fifo)   # opening it to read would block until the timeout: refused before any read
    assert "a FIFO, not a regular file" in _refused(fifo)


def test_dev_zero_behind_a_jsonl_link_is_refused(tmp_path):
    link = tmp_path / "prompts.jsonl"
    link.symlink_to("/dev/zero")
    assert "character device" in _refused(link) and "/dev/zero" in _refused(link)


def test_a_row_over_max_row_bytes_is_refused_naming_the_setting_and_taken_when_raised(tmp_path):
    path = tmp_path / "big.jsonl"
    rows = [{"q": "What is 1 plus 1?", "a": "2"}, {"q": SECRET + "x" * (5 << 20), "a": "3"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    message = _refused(path)
    assert f"{path}:2:" in message and "max_row_bytes" in message
    assert len(_load(path, max_row_bytes=6 << 20)) == 2
    as_json = tmp_path / "big.json"
    as_json.write_text(json.dumps(rows))
    assert "row 1" in _refused(as_json) and "max_row_bytes" in _refused(as_json)


@pytest.mark.parametrize("line, says", [
    ('{"q": ' + "[" * 100_000 + "]" * 100_000 + ', "a": "1"}', "nested too deeply"),
    ('{"q": "' + SECRET + '", "a": ' + "9" * 5000 + "}", "digits"),
    ('{"q": "' + SECRET + '", "a": 1e999}', "out of range"),
    ('{"q": "' + SECRET + '", "a": NaN}', "not a JSON value"),
    ('{"q": "' + SECRET + '\\ud800", "a": "1"}', "column 'q' holds a lone UTF-16 surrogate"),
    ('{"q": "' + SECRET + '", "a": "1"', "not valid JSON"),
])
def test_hostile_json_gets_one_line_naming_file_and_line(tmp_path, line, says):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"q": "What is 1 plus 1?", "a": "2"}\n' + line + "\n")
    message = _refused(path)
    assert f"{path}:2" in message and says in message, message


def test_a_surrogate_pair_is_a_character_not_an_error(tmp_path):
    path = tmp_path / "emoji.jsonl"
    path.write_text('{"q": "What is 1 plus 1? \\ud83d\\ude00", "a": "2"}\n')
    assert _load(path)[0]["prompt"][0]["content"].endswith("\U0001F600")


def test_data_check_refuses_a_fifo_before_any_work(tmp_path):
    import subprocess
    import sys

    from conftest import ROOT

    fifo = tmp_path / "prompts.jsonl"
    os.mkfifo(fifo)
    config = tmp_path / "c.yaml"
    config.write_text(f"data:\n  reasoning_prompts:\n    path: {fifo}\n    kind: math\n")
    out = subprocess.run([sys.executable, "-m", "posttrain.cli", "data", "check", "--config", str(config)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "a FIFO, not a regular file" in out.stderr + out.stdout, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
