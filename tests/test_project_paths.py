"""`paths.*` refused when the config loads, naming the field and its line, before anything is
written: a data store in a git repository posttrain did not create (a user's own checkout), run
folders at the file-system root, the project folder or inside posttrain's code, and folder settings
that name files."""
import subprocess

import pytest

from conftest import ROOT
from posttrain.config.pipeline import ConfigError
from posttrain.config.loading import load_config
from posttrain.data.store import DatasetStore


def _config(tmp_path, paths: str):
    (tmp_path / "pyproject.toml").write_text("")
    path = tmp_path / "c.yaml"
    path.write_text("seed: 1\npaths:\n" + paths)
    return path


def _error(path) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(path)
    return str(err.value)


def test_a_data_store_in_a_users_own_git_checkout_is_refused_and_left_untouched(tmp_path):
    checkout = tmp_path / "mine"
    checkout.mkdir()
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    before = (checkout / ".git" / "config").read_text()
    message = _error(_config(tmp_path, f"  data_store: {checkout}\n"))
    assert f"{tmp_path / 'c.yaml'}:3: paths.data_store:" in message and "did not create as a data store" in message
    assert (checkout / ".git" / "config").read_text() == before and not (checkout / ".dvc").exists()


def test_a_store_posttrain_created_is_accepted(tmp_path):
    DatasetStore(tmp_path / "store")
    assert load_config(_config(tmp_path, f"  data_store: {tmp_path / 'store'}\n")).paths.data_store


@pytest.mark.parametrize("runs, says", [("/", "file-system root"), (".", "holds the project"),
                                        ("..", "holds the project"), (str(ROOT / "posttrain" / "runs"), "posttrain's own code")])
def test_run_folders_that_would_mix_with_other_things_are_refused(tmp_path, runs, says):
    message = _error(_config(tmp_path, f"  runs: {runs}\n"))
    assert "paths.runs:" in message and says in message, message


@pytest.mark.parametrize("field", ["runs", "world", "registry", "data_store", "dvc_remote"])
def test_a_file_where_a_folder_is_needed_is_named(tmp_path, field):
    (tmp_path / "taken").write_text("a file")
    message = _error(_config(tmp_path, f"  {field}: taken\n"))
    assert f"paths.{field}:" in message and "is a file" in message, message


def test_the_defaults_pass(tmp_path):
    cfg = load_config(_config(tmp_path, "  runs: runs\n"))
    assert cfg.paths.runs == "runs"


def test_a_store_whose_run_was_killed_before_its_first_commit_is_still_a_store(tmp_path):
    """Killed between the store's `git init` and its first commit: a repository with no commit, which
    only the store's marker tells from a user's fresh repository."""
    store = DatasetStore(tmp_path / "store")
    subprocess.run(["git", "-C", str(store.root), "update-ref", "-d", "HEAD"], check=True)   # no commit left
    assert load_config(_config(tmp_path, f"  data_store: {store.root}\n")).paths.data_store
    fresh = tmp_path / "fresh"
    subprocess.run(["git", "init", "-q", str(fresh)], check=True)
    assert "did not create as a data store" in _error(_config(tmp_path, f"  data_store: {fresh}\n"))
