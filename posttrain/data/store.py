"""Datasets produced by pipeline runs, versioned with DVC in a separate git repository.

The pipeline must never commit into the user's own source checkout, so produced datasets live in a
*data store*: its own git + DVC repository (default ``runs/data-store``) whose default DVC remote is
a local directory (default: ``dvc-remote`` next to the store, i.e. ``runs/dvc-remote``).

    <root>/
      .git/ .dvc/ .dvcignore .gitignore
      .lock                          fcntl lock around every git/DVC call (git-ignored); a lock file a
                                     killed call left in .git or .dvc/tmp is removed under it
      datasets/<name>                the data (git-ignored by DVC)
      datasets/<name>.dvc            committed to the store's git history

``track`` copies a file or directory to ``datasets/<name>``, ``dvc add``s it, pushes it to the remote
and commits the ``.dvc`` file.  ``DatasetRef.md5`` is DVC's own hash (``outs[0].md5``; directories
end in ``.dir``), so ``restore`` can rebuild exactly that content from the remote even if the same
name has been re-tracked with newer content since: it pulls the object by hash into the store's
cache and checks it out at ``ref.path``.

Why git is required: ``dvc init --no-scm`` works for add/push, but ``dvc.api`` reads at a revision
need a git history, and the store's history is the dataset lineage.

Offline: ``DVC_NO_ANALYTICS=1`` is set before dvc is imported, and the store config has
``core.analytics false`` and ``core.check_update false``.  DVC's per-repo state/index DB
(``core.site_cache_dir``, default ``/var/tmp/dvc``) is kept inside the store
(``.dvc/tmp/site_cache``, set in ``.dvc/config.local``).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

os.environ["DVC_NO_ANALYTICS"] = "1"

from dvc.repo import Repo  # noqa: E402
from dvc_data.hashfile import check, load  # noqa: E402
from dvc_data.hashfile.build import build  # noqa: E402
from dvc_data.hashfile.checkout import checkout  # noqa: E402
from dvc_data.hashfile.hash_info import HashInfo  # noqa: E402

from posttrain.config.paths import STORE_MARKER  # noqa: E402
from posttrain.schema import DatasetRef  # noqa: E402

# `import dvc` installs stdout/stderr handlers on the "dvc" logger at INFO ("Initialized DVC
# repository.", "To track the changes with git, run: ..."); keep only its warnings and errors.
logging.getLogger("dvc").setLevel(logging.WARNING)
logger = logging.getLogger(__name__)

DATA_DIR = "datasets"
REMOTE_NAME = "store"
DEFAULT_ROOT = Path("runs/data-store")
DEFAULT_REMOTE = Path("runs/dvc-remote")
_GIT_USER = ("posttrain", "posttrain@localhost")


class DatasetStoreError(RuntimeError):
    """A data-store operation failed."""


class DatasetMissingError(DatasetStoreError):
    """The dataset's content is neither in the local DVC cache nor on the remote."""


class DatasetStore:
    """A git + DVC repository of produced datasets.  Every public method holds ``<root>/.lock``."""

    remote: Path  # resolved in __init__

    def __init__(self, root: Path, remote: Path | None = None):
        """Open (creating if needed) the store at ``root``.

        ``remote``: local directory used as the DVC remote.  None keeps the remote an existing
        store is configured with, and defaults to ``<root>/../dvc-remote`` for a new one.
        """
        self.root = Path(root).expanduser().resolve()
        self._requested_remote = Path(remote).expanduser().resolve() if remote else None
        self.root.mkdir(parents=True, exist_ok=True)
        with self._lock():
            self._init()

    # -- setup -----------------------------------------------------------------------------------
    def _init(self) -> None:
        if not (self.root / ".git").exists():
            (self.root / STORE_MARKER).write_text("posttrain data store: datasets produced by pipeline runs\n")
            self._git("init", "-q")
        for key, value in (
            ("user.name", _GIT_USER[0]),
            ("user.email", _GIT_USER[1]),
            ("commit.gpgsign", "false"),
        ):
            if self._git("config", "--local", "--get", key, check=False).returncode != 0:
                self._git("config", "--local", key, value)
        site_cache = str(self.root / ".dvc" / "tmp" / "site_cache")
        # Until config.local names it, a Repo opened here would create its state DB under
        # /var/tmp/dvc; the env var (which wins over config) keeps it in the store meanwhile.
        with _quiet(), _env("DVC_SITE_CACHE_DIR", site_cache):
            if not (self.root / ".dvc").exists():
                Repo.init(str(self.root)).close()
            self._configure(site_cache)
        gitignore = self.root / ".gitignore"
        lines = gitignore.read_text().splitlines() if gitignore.exists() else []
        if "/.lock" not in lines:
            gitignore.write_text("\n".join([*lines, "/.lock"]) + "\n")
        self._git("add", "--", ".gitignore", ".dvcignore", ".dvc/config", ".dvc/.gitignore",
                  *([STORE_MARKER] if (self.root / STORE_MARKER).exists() else []))
        self._commit("data store: init / config")

    def _configure(self, site_cache: str) -> None:
        with Repo(str(self.root)) as repo:
            core = repo.config["core"]
            remote_url = repo.config["remote"].get(REMOTE_NAME, {}).get("url")
            if self._requested_remote is not None:
                self.remote = self._requested_remote
            elif remote_url:
                self.remote = Path(remote_url)
            else:
                self.remote = self.root.parent / DEFAULT_REMOTE.name
            self.remote.mkdir(parents=True, exist_ok=True)
            if (
                core.get("analytics") is not False
                or core.get("check_update") is not False
                or core.get("autostage") is not True
                or core.get("remote") != REMOTE_NAME
                or remote_url != str(self.remote)
            ):
                with repo.config.edit("repo") as conf:
                    conf["core"]["analytics"] = False
                    conf["core"]["check_update"] = False
                    conf["core"]["autostage"] = True
                    conf["core"]["remote"] = REMOTE_NAME
                    conf["remote"][REMOTE_NAME] = {"url": str(self.remote)}
            if core.get("site_cache_dir") != site_cache:
                with repo.config.edit("local") as conf:
                    conf["core"]["site_cache_dir"] = site_cache

    # -- public API --------------------------------------------------------------------------------
    def track(self, source: Path, name: str, rows: int | None = None) -> DatasetRef:
        """Copy ``source`` to ``datasets/<name>``, dvc-add it, push it, commit the .dvc file.

        Re-tracking a name replaces the local copy; the previous content stays restorable by its
        ref (cache + remote keep every pushed version).  Identical content adds no commit.
        If add/push fails the .dvc change stays uncommitted and the next track commits it.
        """
        source = Path(source).expanduser().resolve()
        if not source.exists():
            raise FileNotFoundError(f"cannot track {name!r}: {source} does not exist")
        rel = _dataset_relpath(name)
        dest = self.root / rel
        dvcfile = dest.with_name(dest.name + ".dvc")
        with self._lock():
            if source != dest:
                if dest.is_dir() and not dest.is_symlink():
                    shutil.rmtree(dest)
                elif dest.exists() or dest.is_symlink():
                    dest.unlink()
                dest.parent.mkdir(parents=True, exist_ok=True)
                if source.is_dir():
                    shutil.copytree(source, dest)
                else:
                    shutil.copyfile(source, dest)
            with _quiet(), Repo(str(self.root)) as repo:
                repo.add(str(dest))
                repo.push(targets=[str(dest)], remote=REMOTE_NAME)
            md5 = _read_dvcfile_md5(dvcfile)
            self._git("add", "--", str(dvcfile.relative_to(self.root)),
                      str((dest.parent / ".gitignore").relative_to(self.root)))
            self._commit(f"track {name} md5={md5}" + (f" rows={rows}" if rows is not None else ""))
        return DatasetRef(name=name, path=rel.as_posix(), md5=md5, rows=rows)

    def restore(self, ref: DatasetRef) -> Path:
        """Make ``<root>/<ref.path>`` bit-identical to ``ref.md5`` (pull from the remote if needed).

        A missing or altered local copy is rebuilt; an intact one is left alone (DVC compares by
        hash, using its state DB to skip re-hashing unchanged files).
        """
        with self._lock():
            return self._restore(ref)

    def read_text(self, ref: DatasetRef, encoding: str = "utf-8") -> str:
        """Restore, then read (under the same lock, so a concurrent track can't swap the bytes)."""
        with self._lock():
            path = self._restore(ref)
            if path.is_dir():
                raise IsADirectoryError(f"dataset {ref.name!r} is a directory: {path}")
            return path.read_text(encoding=encoding)

    # -- helpers -----------------------------------------------------------------------------------
    def _restore(self, ref: DatasetRef) -> Path:
        target = self.root / _safe_relpath(ref.path)
        hash_info = HashInfo("md5", ref.md5)
        with _quiet(), Repo(str(self.root)) as repo:
            cache = repo.cache.local
            if not _in_cache(cache, hash_info):
                if _workspace_matches(repo, target, hash_info):
                    return target  # intact copy, cache pruned: nothing to do
                failed: set = set()
                try:
                    result = repo.cloud.pull([hash_info], remote=REMOTE_NAME)
                    failed = set(result.failed)
                except Exception as exc:  # remote dir gone, unreadable, ...
                    raise DatasetMissingError(self._missing_msg(ref, f"{exc}")) from exc
                if failed or not _in_cache(cache, hash_info):
                    raise DatasetMissingError(self._missing_msg(ref))
            obj = load(cache, hash_info)
            target.parent.mkdir(parents=True, exist_ok=True)
            checkout(str(target), repo.fs, obj, cache, force=True, state=repo.state, quiet=True)
        return target

    def _missing_msg(self, ref: DatasetRef, why: str = "") -> str:
        msg = (
            f"dataset {ref.name!r} (md5 {ref.md5}) is neither in the local DVC cache of "
            f"{self.root} nor on the DVC remote {self.remote}; it cannot be restored"
        )
        return f"{msg} ({why})" if why else msg

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """Exclusive fcntl lock on <root>/.lock (not re-entrant: never nest)."""
        with open(self.root / ".lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                self._clear_stale_locks()
                self._commit_interrupted_tracks()
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _clear_stale_locks(self) -> None:
        """Remove the lock files of a git or DVC call that was killed in the store (kill -9 of a run).

        Call with <root>/.lock held.  Every git and DVC call on the store is made by this class under
        that lock, so a lock file seen while holding it has no live owner.  Left alone, such a file
        blocks every later run: git's ``index.lock`` (git add/commit, and DVC's autostage through
        dulwich) fails the next ``dvc add`` with ``FileLocked`` and the next ``git add`` with "Unable
        to create '.git/index.lock': File exists"; a ref or config ``.lock`` fails commits and config
        writes the same way.  DVC's ``.dvc/tmp/rwlock`` lists its holders by pid: DVC drops dead pids
        itself, but one whose pid now names another live process blocks ``dvc add`` ("is busy, it is
        being blocked by").  DVC's repo lock ``.dvc/tmp/lock`` needs nothing: it is an flock
        (zc.lockfile), released by the kernel when its holder dies, so a leftover file blocks nobody.
        """
        git = self.root / ".git"
        stale = [p for p in (git / "index.lock", git / "HEAD.lock", git / "config.lock", git / "packed-refs.lock")
                 if p.exists()]
        stale += sorted((git / "refs").rglob("*.lock"))
        rwlock = self.root / ".dvc" / "tmp" / "rwlock"
        if rwlock.exists() and not _rwlock_is_empty(rwlock):
            stale.append(rwlock)
        for path in stale:
            path.unlink(missing_ok=True)
            logger.warning(f"data store {self.root}: removed {path.relative_to(self.root)}, left by a git/DVC "
                           "call that was killed (no process holds it: every call on the store runs under "
                           f"{self.root / '.lock'}, held now)")

    def _commit_interrupted_tracks(self) -> None:
        """Give each dataset a killed `track` added but never committed its own lineage commit.

        Call with <root>/.lock held. `dvc add` stages the `.dvc` file itself (autostage); a kill
        before `track`'s commit leaves it staged, and the next commit in the store, whatever it is
        for, would take it in under its own message: the dataset's version would have no commit of its
        own in the lineage. Its data is pushed first (the kill may have come before the push)."""
        if not (self.root / ".git").is_dir() or not (self.root / ".dvc").is_dir():
            return
        listing = self._git("status", "--porcelain=v1", "-z", "--untracked-files=all", "--", DATA_DIR).stdout
        dvcfiles = sorted({entry[3:] for entry in listing.split("\0") if entry[3:].endswith(".dvc")})
        for rel in dvcfiles:
            dvcfile = self.root / rel
            if not dvcfile.is_file():
                continue
            name = PurePosixPath(rel).relative_to(DATA_DIR).as_posix()[:-len(".dvc")]
            md5 = _read_dvcfile_md5(dvcfile)
            data = dvcfile.with_name(dvcfile.name[:-len(".dvc")])
            try:
                with _quiet(), Repo(str(self.root)) as repo:
                    repo.push(targets=[str(data)], remote=REMOTE_NAME)
            except Exception as exc:  # noqa: BLE001 - the commit still records what was tracked
                logger.warning(f"data store {self.root}: {name} (md5 {md5}) could not be pushed: {exc}")
            ignore = data.parent / ".gitignore"
            self._git("add", "--", rel, *([str(ignore.relative_to(self.root))] if ignore.exists() else []))
            self._commit(f"track {name} md5={md5} (its run stopped before this commit)")
            logger.warning(f"data store {self.root}: committed {name} (md5 {md5}), which a stopped run tracked "
                           "but did not commit")

    def _git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        # Drop GIT_DIR & co. so a caller running inside another repo's hook can't redirect us.
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        proc = subprocess.run(
            ["git", *args], cwd=self.root, env=env, capture_output=True, text=True
        )
        if check and proc.returncode != 0:
            raise DatasetStoreError(
                f"git {' '.join(args)} failed in {self.root}: {proc.stderr.strip()}"
            )
        return proc

    def _commit(self, message: str) -> None:
        if self._git("diff", "--cached", "--quiet", check=False).returncode != 0:
            self._git("commit", "-q", "--no-verify", "-m", message)


@contextlib.contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence DVC 3.67's own DeprecationWarnings (pygtrie `_NoneStep.value`, on every add)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"_NoneStep\.value", category=DeprecationWarning)
        yield


def _rwlock_is_empty(path: Path) -> bool:
    try:
        holders = json.loads(path.read_text())
    except (OSError, ValueError):
        return False  # cut off mid-write: DVC refuses it as well (RWLockFileCorruptedError)
    return isinstance(holders, dict) and not any(holders.get(mode) for mode in ("read", "write"))


def _in_cache(cache, hash_info) -> bool:
    try:
        check(cache, load(cache, hash_info))  # raises on a missing or corrupt object
    except Exception:
        return False
    return True


def _workspace_matches(repo: Repo, target: Path, hash_info: HashInfo) -> bool:
    if not target.exists():
        return False
    try:
        _, _, obj = build(
            repo.cache.local, str(target), repo.fs, "md5", dry_run=True, ignore=repo.dvcignore
        )
    except Exception:
        return False
    return obj.hash_info.value == hash_info.value


def _dataset_relpath(name: str) -> PurePosixPath:
    return PurePosixPath(DATA_DIR) / _safe_relpath(name, what="dataset name")


def _safe_relpath(p: str, what: str = "dataset path") -> PurePosixPath:
    rel = PurePosixPath(p)
    if rel.is_absolute() or ".." in rel.parts or str(rel) in ("", ".") or rel.name.endswith(".dvc"):
        raise ValueError(f"invalid {what}: {p!r}")
    return rel


def _read_dvcfile_md5(dvcfile: Path) -> str:
    from dvc.utils.serialize import load_yaml

    data = load_yaml(str(dvcfile))
    try:
        return str(data["outs"][0]["md5"])
    except (KeyError, IndexError, TypeError) as exc:
        raise DatasetStoreError(f"{dvcfile} has no outs[0].md5") from exc


__all__ = [
    "DatasetStore",
    "DatasetStoreError",
    "DatasetMissingError",
    "DEFAULT_ROOT",
    "DEFAULT_REMOTE",
]


def store_for(inputs) -> DatasetStore:
    """The data store a stage writes to, from its StageInputs (data_store, dvc_remote)."""
    if not inputs.data_store:
        raise ValueError("this stage produces a dataset but its inputs name no data_store")
    return DatasetStore(Path(inputs.data_store), Path(inputs.dvc_remote) if inputs.dvc_remote else None)


def track_user_data(path: Path, project_root: Path) -> str:
    """`dvc add` a user's data file or directory in the project's own DVC repository (so `git`
    versions its `.dvc` file and `dvc push` backs it up); returns a line naming the content hash.
    Stages key their cache on the content of the data they read, so a changed file reruns exactly
    the stages that consume it whether or not it is tracked; tracking makes each version
    recoverable (`dvc checkout` at an old commit)."""
    if not (project_root / ".dvc").is_dir():
        raise FileNotFoundError(f"{project_root} is not a DVC project (run `dvc init` there first)")
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    try:
        path.relative_to(project_root)
    except ValueError:
        raise ValueError(f"{path} is outside the project {project_root}: copy it under data/ first") from None
    Repo(str(project_root)).add(str(path))
    md5 = _read_dvcfile_md5(path.with_name(path.name + ".dvc"))
    return f"tracked {path.relative_to(project_root)} (md5 {md5}); commit {path.name}.dvc with git"
