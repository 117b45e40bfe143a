"""Normalised rows cached by content (posttrain.data.row_cache): a second load of the same data,
settings and code reads the rows back, gives the same rows, notes, counts and prepared files, and
anything that could change the rows (the file, a setting, the code) misses."""
import json

import pytest

from posttrain.data import row_cache, sources
from posttrain.data.sources import SourceConfig, load_role

ROWS = [{"question": f"What is {i} plus 2?", "solution": f"So it is $\\boxed{{{i + 2}}}$."} for i in range(8)]
ROWS.append({"question": "Prove it.", "solution": "No box here."})   # dropped, counted


@pytest.fixture
def counted(monkeypatch):
    calls = []
    real = sources._normalise_source

    def normalise(role, source, root):
        calls.append(source.label)
        return real(role, source, root)

    monkeypatch.setattr(sources, "_normalise_source", normalise)
    return calls


def _source(**extra) -> SourceConfig:
    return SourceConfig(path="data/math.jsonl", kind="math", columns={"question": "prompt"},
                        answer_from={"column": "solution", "extract": "boxed"}, drop=["no_answer"], **extra)


def _write(tmp_path, rows=ROWS):
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "math.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _load(tmp_path, source=None):
    return load_role("reasoning_prompts", [source or _source()], tmp_path, 0, tmp_path / "cache")


def test_a_second_load_reads_the_same_rows_notes_counts_and_origins_back(tmp_path, counted):
    _write(tmp_path)
    first = _load(tmp_path)
    second = _load(tmp_path)
    assert counted == ["data/math.jsonl"]            # normalised once
    assert second.rows == first.rows and len(second.rows) == 8
    assert second.notes == first.notes and any("dropped 1 of 9 rows (no_answer 1)" in n for n in second.notes)
    assert second.dropped == first.dropped == {"no_answer": 1}
    assert second.hashes == first.hashes
    assert sorted(second.origins.values()) == sorted(first.origins.values())
    assert set(second.origins) == {id(r) for r in second.rows}   # errors after loading still name the line


@pytest.mark.parametrize("change", ["file", "setting", "code", "cut_short"])
def test_what_could_change_the_rows_misses(tmp_path, counted, monkeypatch, change):
    _write(tmp_path)
    _load(tmp_path)
    source = None
    if change == "file":
        _write(tmp_path, ROWS[:5])
    elif change == "setting":
        source = _source(limit=3)
    elif change == "code":
        monkeypatch.setattr(row_cache, "code_version", lambda: "another version of the normalising code")
    else:
        cached = next((tmp_path / "cache").glob("*.jsonl"))
        cached.write_text("".join(cached.read_text().splitlines(keepends=True)[:-2]))
    rows = _load(tmp_path, source).rows
    assert len(counted) == 2
    assert len(rows) == {"file": 5, "setting": 3}.get(change, 8)


def test_a_weight_is_not_part_of_the_key(tmp_path, counted):
    _write(tmp_path)
    other = tmp_path / "data" / "other.jsonl"
    other.write_text(json.dumps({"question": "What is 1 plus 1?", "solution": "$\\boxed{2}$"}) + "\n")
    mixed = lambda w: load_role("reasoning_prompts", [_source(weight=w), _source(weight=1).model_copy(
        update={"path": "data/other.jsonl"})], tmp_path, 0, tmp_path / "cache")
    mixed(1)
    mixed(3)
    assert counted == ["data/math.jsonl", "data/other.jsonl"]


def test_the_prepared_files_of_a_cached_load_are_the_ones_a_fresh_load_writes(tmp_path, counted):
    from tests.userdata import build_project

    from posttrain.config.loading import load_config
    from posttrain.data.prepared import prepare

    cfg = load_config(build_project(tmp_path))
    cold = prepare(cfg, tmp_path / "prepared-cold")
    normalised = len(counted)
    warm = prepare(cfg, tmp_path / "prepared-warm")
    assert normalised > 5 and len(counted) == normalised   # every source of every role and suite read back
    assert {k: r.md5 for k, r in warm.roles.items()} == {k: r.md5 for k, r in cold.roles.items()}
    assert {k: r.md5 for k, r in warm.suites.items()} == {k: r.md5 for k, r in cold.suites.items()}
