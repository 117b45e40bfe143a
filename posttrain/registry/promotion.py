"""Production alias with a durable history: promote, rollback, reconcile.

The registered model's MLflow alias ``production`` says which version serves.  Every move of it is
recorded in ``<registry root>/production_history.jsonl``, one JSON object per line::

    {"id", "model", "action", "from", "to", "at", "actor", "reason",
     "stage", "digest", "forced", "overridden"}

``action`` is one of ``promote | rollback | auto-rollback | force-promote``; ``at`` is UTC ISO-8601;
``actor`` is who moved it, as the caller names it (``user@host`` from the CLI, ``flow-run:<id>`` from
a served flow); ``overridden`` lists the refusal reasons a forced move went past.  Several registered
models may share one registry root: every entry names its ``model`` and readers keep only their own.
With a registry server (``paths.registry: http://...``) the root is still this machine's folder
(``<paths.runs>/registry``), so ``production_owner-<model>.json`` names the registered model the
history belongs to (its creation time and URI): a history is never replayed onto another server's
model of the same name.

**The history is the source of truth; the alias is a projection of it.**  A move is *committed*
when its history line is durably on disk, never before.

Protocol (everything below runs under an exclusive ``fcntl.flock`` on
``<registry root>/promotion.lock``, so promote/rollback calls from any number of threads, processes,
flow runs or CLI invocations never interleave)::

    0. reconcile()                      repair whatever an earlier crash left behind (below)
    1. read history -> current production, rollback stack
    2. check the target version         gate passed, not rejected, checkpoint digest intact
    3. write intent file                production_intent-<model>.json: the full entry, written to a
                                        temp file, fsynced, renamed into place, directory fsynced
    4. move the MLflow alias            (the only non-file step)
    5. append the entry to the history  a single O_APPEND write of one '\\n'-terminated line + fsync
                                        <- commit point
    6. delete the intent file

A crash (exception, SIGKILL, power loss) at any point leaves either the old committed state or the
new one, never a mix:

* before 5: the history does not contain the entry, so the move did not happen.  The alias may
  already point at the new version (crash between 4 and 5); the next call's ``reconcile`` puts it
  back to the last committed ``to`` (or removes it if nothing was ever committed) and deletes the
  stale intent.  Callers see the exception; retrying the operation is safe.
* a torn last history line (crash in the middle of 5) does not parse and has no trailing newline:
  readers ignore it and ``reconcile`` truncates it, so that move counts as not committed either.
* after 5: the entry is committed; ``reconcile`` only deletes the leftover intent.

``reconcile`` also puts the alias back if it was moved outside this module (e.g. by hand in the
MLflow UI), with a warning: only recorded moves count.  Readers (:func:`history`,
:func:`current_production`) take no lock; they read committed lines only.

Fault injection for tests: ``POSTTRAIN_PROMOTION_FAULT=<point>`` (``after-intent``,
``after-alias``, ``after-commit``) raises :class:`SimulatedCrash` at that point;
``<point>:exit`` ends the process with ``os._exit(99)`` instead (no cleanup, like a kill -9).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from mlflow.exceptions import MlflowException

from posttrain.registry.checkpoint import directory_digest
from posttrain.registry.model_registry import GATE_PASSED, STATUS_REJECTED, Registry, candidate_alias

log = logging.getLogger(__name__)

PRODUCTION_ALIAS = "production"
HISTORY_FILE = "production_history.jsonl"
LOCK_FILE = "promotion.lock"
ACTIONS = ("promote", "rollback", "auto-rollback", "force-promote")
FAULT_ENV = "POSTTRAIN_PROMOTION_FAULT"
FAULT_POINTS = ("after-intent", "after-alias", "after-commit")


class PromotionError(RuntimeError):
    """A promotion or rollback was refused or could not be carried out."""


class PromotionRefused(PromotionError):
    """The target version failed a check (gate, rejection, checkpoint digest)."""

    def __init__(self, version: str, problems: list[str]):
        self.version, self.problems = version, problems
        super().__init__(f"version {version} cannot become production: " + "; ".join(problems)
                         + " (override with force and a reason)")


class LockTimeout(PromotionError):
    pass


class SimulatedCrash(RuntimeError):
    """Raised by the test fault hook."""


# -- paths and file primitives --------------------------------------------------------------------

def history_path(registry: Registry) -> Path:
    return registry.root / HISTORY_FILE


def intent_path(registry: Registry) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]", "_", registry.model_name)
    return registry.root / f"production_intent-{slug}.json"


def owner_path(registry: Registry) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]", "_", registry.model_name)
    return registry.root / f"production_owner-{slug}.json"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _append_line(path: Path, entry: dict) -> None:
    data = (json.dumps(entry, sort_keys=True, ensure_ascii=False) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        written = os.write(fd, data)
        if written != len(data):  # disk full etc.: leave a torn line, which counts as not committed
            raise OSError(errno.EIO, f"short write to {path} ({written} of {len(data)} bytes)")
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_dir(path.parent)


def _read_lines(path: Path) -> tuple[list[dict], int]:
    """(committed entries of every model, byte length of the committed prefix)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    entries, good = [], 0
    pos = 0
    while pos < len(raw):
        end = raw.find(b"\n", pos)
        if end < 0:  # torn last line: no newline, not committed
            break
        line = raw[pos:end]
        if line.strip():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                if raw.find(b"\n", end + 1) >= 0 or end + 1 < len(raw):
                    raise PromotionError(f"{path} is corrupt in the middle (line at byte {pos}); "
                                         "fix it by hand") from None
                break  # garbage on the last line only: a torn write
        pos = end + 1
        good = pos
    return entries, good


def _fault(point: str) -> None:
    spec = os.environ.get(FAULT_ENV, "")
    if not spec:
        return
    name, _, how = spec.partition(":")
    if name != point:
        return
    if how == "exit":
        os._exit(99)
    raise SimulatedCrash(f"simulated crash {point}")


@contextlib.contextmanager
def _locked(registry: Registry, timeout: float | None) -> Iterator[None]:
    """Exclusive flock on <root>/promotion.lock.

    ``timeout=None`` (the default everywhere) waits in the kernel, which wakes waiters when the
    holder lets go; the lock is released by the kernel if its holder dies, and the critical section
    is short (a digest and a few SQLite writes), so an unbounded wait cannot hang.  A number polls
    instead, which is not fair: a poller can starve behind a process that promotes in a loop.
    """
    path = registry.root / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LockTimeout(f"another promotion/rollback holds {path} "
                                          f"(waited {timeout:.0f} s)") from None
                    time.sleep(0.01)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


# -- reading --------------------------------------------------------------------------------------

def history(registry: Registry) -> list[dict]:
    """Committed production moves of this registry's model, oldest first."""
    entries, _ = _read_lines(history_path(registry))
    return [e for e in entries if e.get("model") == registry.model_name]


def current_production(registry: Registry) -> str | None:
    """The committed production version (the last history entry's ``to``), or None."""
    entries = history(registry)
    return entries[-1]["to"] if entries else None


def _stack(entries: list[dict]) -> list[str]:
    """Production versions as a stack: promotes push, rollbacks pop back to their target."""
    stack: list[str] = []
    for e in entries:
        to = e["to"]
        if e["action"] in ("rollback", "auto-rollback") and to in stack:
            del stack[len(stack) - stack[::-1].index(to):]
        else:
            stack.append(to)
    return stack


def previous_production(registry: Registry) -> str | None:
    """What :func:`rollback` without ``to`` would move production to."""
    stack = _stack(history(registry))
    return stack[-2] if len(stack) >= 2 else None


def resolve_version(registry: Registry, ref: str) -> str:
    """A version number, a stage name (its ``candidate-<stage>`` alias), or an alias name."""
    ref = str(ref).strip()
    if ref.isdigit():
        return str(int(ref))
    aliases = registry.aliases()
    for name in (candidate_alias(ref), ref):
        if name in aliases:
            return aliases[name]
    if ref.startswith("candidate-") or re.fullmatch(r"[a-z_]+", ref):
        raise PromotionError(f"no version to promote for {ref!r}: alias "
                             f"{ref if ref.startswith('candidate-') else candidate_alias(ref)!r} is not set "
                             f"in {registry.model_name} (no version of that stage passed its gate, or the stage left its "
                             "parent's weights unchanged and kept the parent's version: promote that version by "
                             "number, `posttrain status` shows it)")
    raise PromotionError(f"{ref!r} is neither a version number, a stage nor an alias of {registry.model_name}")


def get_version(registry: Registry, version: str) -> dict:
    """The registered version (Registry.get's dict); PromotionError if the model has no such version."""
    try:
        return registry.get(version)
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            raise PromotionError(f"{registry.model_name} has no version {version}") from None
        raise


def check_promotable(registry: Registry, version: str) -> list[str]:
    """Reasons why ``version`` must not serve (empty: it may)."""
    mv = get_version(registry, version)
    tags = mv["tags"]
    problems: list[str] = []
    gate = tags.get("gate")
    if tags.get("status") == STATUS_REJECTED:
        problems.append(f"it was rejected (gate {gate or 'failed'})")
    elif gate is None:
        problems.append("it has no gate verdict")
    elif gate != GATE_PASSED:
        problems.append(f"its gate {gate}")
    expected = tags.get("digest")
    source = Path(mv["source"] or "")
    if not mv["source"] or not source.is_dir():
        problems.append(f"its checkpoint directory {source} is missing")
    elif not expected:
        problems.append("it has no digest tag")
    else:
        actual = directory_digest(source)
        if actual != expected:
            problems.append(f"its checkpoint {source} was altered (digest {actual[:19]}..., "
                            f"registered {expected[:19]}...)")
    return problems


# -- reconcile ------------------------------------------------------------------------------------

def _reconcile(registry: Registry) -> list[str]:
    """Bring the alias and intent file in line with the committed history. Lock must be held."""
    notes: list[str] = []
    path = history_path(registry)
    entries, good = _read_lines(path)
    if path.exists() and path.stat().st_size > good:
        with open(path, "r+b") as f:
            f.truncate(good)
            f.flush()
            os.fsync(f.fileno())
        notes.append(f"dropped a torn (uncommitted) last line of {path.name}")
    mine = [e for e in entries if e.get("model") == registry.model_name]
    _check_owner(registry, bool(mine))
    target = mine[-1]["to"] if mine else None
    ipath = intent_path(registry)
    intent = None
    if ipath.exists():
        try:
            intent = json.loads(ipath.read_text())
        except (OSError, json.JSONDecodeError):
            intent = {"id": None, "action": "?", "to": "?"}
        if intent.get("id") in {e.get("id") for e in mine}:
            notes.append(f"{intent.get('action')} to {intent.get('to')} was committed; removed its intent file")
        else:
            notes.append(f"interrupted {intent.get('action')} to {intent.get('to')} "
                         f"(started {intent.get('at')}) was not committed: rolled back")
    alias = registry.alias(PRODUCTION_ALIAS)
    if alias != target:
        if target is None:
            registry.delete_alias(PRODUCTION_ALIAS)
        else:
            registry.set_alias(PRODUCTION_ALIAS, target)
        if intent is None:
            notes.append(f"alias {PRODUCTION_ALIAS!r} pointed at {alias} outside the recorded history; "
                         f"reset to {target}")
    if ipath.exists():
        ipath.unlink()
        _fsync_dir(ipath.parent)
    for note in notes:
        log.warning("%s: %s", registry.model_name, note)
    return notes


def _check_owner(registry: Registry, has_history: bool) -> None:
    """The history in this folder is that of one registered model: the one it was first written for
    (known by its creation time, the same through a server or the SQLite file it serves). A
    `paths.registry` pointed at another server with a model of the same name must not have this
    history replayed onto its aliases. Lock must be held."""
    created = registry.created_ms()
    path = owner_path(registry)
    try:
        owner = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        owner = None
    if has_history and owner is not None and owner.get("created_ms") != created:
        raise PromotionError(
            f"{history_path(registry)} records the production moves of the {registry.model_name} registered at "
            f"{owner.get('uri')}, not of the one at {registry.uri} (paths.registry): set paths.registry back, or move "
            f"{history_path(registry).name} and {path.name} away to start this registry's history")
    if owner is None or not has_history:
        _write_atomic(path, json.dumps({"model": registry.model_name, "created_ms": created,
                                        "uri": registry.uri}, sort_keys=True).encode())


def reconcile(registry: Registry, *, timeout: float | None = None) -> list[str]:
    """Repair what an interrupted move left behind; returns what was done (empty: all consistent)."""
    with _locked(registry, timeout):
        return _reconcile(registry)


# -- moves ----------------------------------------------------------------------------------------

def _move(registry: Registry, entry: dict) -> dict:
    """Steps 3-6 of the protocol. Lock must be held and reconcile done."""
    ipath = intent_path(registry)
    _write_atomic(ipath, json.dumps(entry, sort_keys=True).encode())
    try:
        _fault("after-intent")
        registry.set_alias(PRODUCTION_ALIAS, entry["to"])
        _fault("after-alias")
        _append_line(history_path(registry), entry)
    except BaseException:
        # Live process: undo now (best effort; the next call reconciles anyway).
        with contextlib.suppress(Exception):
            _reconcile(registry)
        raise
    _fault("after-commit")
    ipath.unlink()
    _fsync_dir(ipath.parent)
    return entry


def _entry(registry: Registry, action: str, frm: str | None, to: str, *, reason: str | None,
           actor: str, forced: bool, overridden: list[str]) -> dict:
    mv = get_version(registry, to)
    return {
        "id": uuid.uuid4().hex, "model": registry.model_name, "action": action,
        "from": frm, "to": to, "at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "actor": actor, "reason": reason or None,
        "stage": mv["stage"], "digest": mv["tags"].get("digest"),
        "forced": forced, "overridden": overridden,
    }


def _checked(registry: Registry, version: str, force: bool, reason: str | None) -> list[str]:
    if force and not (reason and reason.strip()):
        raise PromotionError("force needs a non-empty reason (it is recorded in the history)")
    problems = check_promotable(registry, version)
    if problems and not force:
        raise PromotionRefused(version, problems)
    return problems


def promote(registry: Registry, version: str, *, actor: str, reason: str | None = None, force: bool = False,
            timeout: float | None = None) -> dict:
    """Move ``production`` to ``version`` (a number, or a stage name meaning ``candidate-<stage>``).

    Refuses (:class:`PromotionRefused`) a version whose gate failed or is missing, that is tagged
    rejected, or whose checkpoint directory is missing or no longer matches its ``digest`` tag,
    unless ``force=True`` with a non-empty ``reason`` (recorded as ``force-promote``, with the
    overridden problems).  ``actor``: who moves it, as the history records it.  Returns the
    committed history entry.
    """
    with _locked(registry, timeout):
        _reconcile(registry)
        current = current_production(registry)
        target = resolve_version(registry, version)
        if target == current:
            raise PromotionError(f"version {target} is already production")
        problems = _checked(registry, target, force, reason)
        action = "force-promote" if force else "promote"
        return _move(registry, _entry(registry, action, current, target, reason=reason, actor=actor,
                                      forced=force, overridden=problems))


def rollback(registry: Registry, *, actor: str, to: str | None = None, reason: str | None = None,
             force: bool = False, auto: bool = False,
             if_production: str | None = None, timeout: float | None = None) -> dict:
    """Move ``production`` back: to the version that served before the current one (history is
    a stack: rolling back twice goes two promotions back), or to the named version ``to``.

    The target goes through the same checks as :func:`promote` (a rollback onto a checkpoint that
    was altered since would serve something nobody evaluated); ``force`` with a reason overrides.
    ``actor``: who moves it (as in :func:`promote`); ``auto=True`` records the move as ``auto-rollback``
    (monitoring, not a person).
    ``if_production``: only if that version is still production (checked under the lock), so a
    decision taken on an evaluation never undoes a promotion made while it ran.
    """
    with _locked(registry, timeout):
        _reconcile(registry)
        entries = history(registry)
        current = entries[-1]["to"] if entries else None
        if current is None:
            raise PromotionError(f"{registry.model_name} has no production version to roll back")
        if if_production is not None and current != if_production:
            raise PromotionError(f"production moved from {if_production} to {current} meanwhile; "
                                 f"not rolling back (evaluate {current} again)")
        if to is None:
            stack = _stack(entries)
            if len(stack) < 2:
                raise PromotionError(f"no earlier production version to roll back to (production is {current}; "
                                     "name one with --to)")
            target = stack[-2]
        else:
            target = resolve_version(registry, to)
        if target == current:
            raise PromotionError(f"version {target} is already production")
        problems = _checked(registry, target, force, reason)
        return _move(registry, _entry(registry, "auto-rollback" if auto else "rollback", current, target,
                                      reason=reason, actor=actor, forced=force, overridden=problems))


__all__ = [
    "PRODUCTION_ALIAS", "ACTIONS", "PromotionError", "PromotionRefused", "LockTimeout", "SimulatedCrash",
    "promote", "rollback", "history", "current_production", "previous_production", "reconcile",
    "check_promotable", "get_version", "resolve_version", "history_path", "intent_path",
]
