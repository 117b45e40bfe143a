"""`paths.*` checked when the config loads, before anything is written: a folder setting that names a
file, `paths.runs` at the file-system root, at the project folder or an ancestor of it, or inside
posttrain's own code, and `paths.data_store` naming a git repository that is not a data store (the
store commits, configures git and DVC, and removes stale lock files in the repository it is given:
in a user's own checkout that would rewrite their history and settings).

Problems come back in pydantic's error shape, so `load_config` names each field with its file:line."""
from __future__ import annotations

import subprocess
from pathlib import Path

# What marks a folder as a data store `DatasetStore` created (posttrain.data.store): this file, written
# before its `git init` (so a run killed before the first commit leaves a store still known as one),
# or, for stores made before the file existed, the store's first commit.
STORE_MARKER = ".posttrain-data-store"
STORE_FIRST_COMMIT = "data store: init / config"
_CODE_FOLDERS = ("posttrain", "flows", "stages", "configs", "tests", "bench", "scripts", "docs", ".git")


def _problem(field: str, value: str, message: str) -> dict:
    return {"loc": ("paths", field), "type": "path", "input": value, "msg": message}


def is_data_store(path: Path) -> bool:
    """A folder `DatasetStore` created: it holds the marker, or its git history starts with the store's commit."""
    if (Path(path) / STORE_MARKER).is_file():
        return True
    try:
        first = subprocess.run(["git", "-C", str(path), "log", "--reverse", "--format=%s"], capture_output=True,
                               text=True, timeout=30, env={"PATH": "/usr/bin:/bin", "HOME": str(path)})
    except (OSError, subprocess.TimeoutExpired):
        return False
    return first.returncode == 0 and first.stdout.splitlines()[:1] == [STORE_FIRST_COMMIT]


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def path_problems(cfg) -> list[dict]:
    """What is wrong with the config's `paths` (empty: nothing)."""
    from posttrain.config.pipeline import registry_server

    paths, root = cfg.paths, Path(cfg.root).resolve()
    code = Path(__file__).resolve().parents[2]
    problems = []
    folders = {"world": paths.world, "runs": paths.runs, "data_store": paths.data_store, "dvc_remote": paths.dvc_remote}
    if not registry_server(paths.registry):
        folders["registry"] = paths.registry
    for field, value in folders.items():
        resolved = cfg.path(value).resolve()
        if resolved.exists() and not resolved.is_dir():
            problems.append(_problem(field, value, f"{resolved} is a file; paths.{field} must name a folder"))
    runs = cfg.path(paths.runs).resolve()
    if runs == Path(runs.anchor) or runs == Path.home().resolve() or _inside(root, runs):
        problems.append(_problem("runs", paths.runs, f"{runs} holds the project {root} (or is the file-system root "
                                 "or your home folder): run folders need a folder of their own, e.g. runs"))
    elif any(_inside(runs, code / folder) for folder in _CODE_FOLDERS):
        problems.append(_problem("runs", paths.runs, f"{runs} is inside posttrain's own code ({code}): choose a "
                                 "folder for run outputs, e.g. runs"))
    store = cfg.path(paths.data_store).resolve()
    if (store / ".git").exists() and not is_data_store(store):
        problems.append(_problem("data_store", paths.data_store, f"{store} is a git repository that posttrain did not "
                                 "create as a data store; the store commits and configures git and DVC in it: "
                                 "point paths.data_store at a new folder (default runs/data-store)"))
    return problems
