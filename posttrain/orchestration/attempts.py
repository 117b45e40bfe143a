"""Stage attempts: a run killed inside a stage (kill -9, OOM, reboot) leaves in-stage trainer
checkpoints behind; the relaunched run continues from them instead of from step 0.

Finished stages are reused through Prefect's result cache (flows/tasks.py).  This module covers
the stage that was running when the process died.  A relaunch is a new flow run, so its work
directory (``runs/<run_id>/<stage>``) is new and the stage's own ``resume_point`` (posttrain.training.trainers)
finds nothing there.  Hence:

* every stage execution writes ``<work_dir>/attempt.json`` = ``{"key", "started", "finished"}``
  when it starts (``key``: the stage's cache key, i.e. stage code version, stage config, parent
  checkpoint digest, datasets, seed) and sets ``finished`` when the stage function returns;
* an attempt whose work directory holds no trainer checkpoint of its own copies, per trainer folder
  (``trainer/``, ``on_policy/``, ...), the newest *complete* ``checkpoint-<step>`` that an
  unfinished attempt at the same key left under the same runs directory.  Same key means same
  inputs, so continuing that optimisation is what the interrupted run would have done.  A finished
  attempt is never a source: recomputing a finished stage (``--force``, a deleted cached checkpoint)
  must train, not reload its last step.

Complete: HF Trainer's ``_save_checkpoint`` (transformers 5.24) writes ``trainer_state.json`` last,
after weights, optimizer and RNG state, so a ``checkpoint-<step>`` without a readable one was cut
off mid-save.  ``get_last_checkpoint`` does not check this and resuming from it fails on a
half-written file: such folders are removed from the work directory before the stage starts.
Copies go to a temporary name first and are renamed into place, so a kill during the copy leaves
nothing that looks like a checkpoint.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from datetime import datetime, timezone
from pathlib import Path

ATTEMPT_FILE = "attempt.json"
TRAINER_STATE = "trainer_state.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")  # transformers.trainer_utils' PREFIX_CHECKPOINT_DIR pattern
_COPYING = re.compile(r"^\.checkpoint-\d+\.tmp-[0-9a-f]{8}$")  # an adoption copy cut off by a kill


def is_complete(checkpoint: Path) -> bool:
    try:
        json.loads((checkpoint / TRAINER_STATE).read_text())
        return True
    except (OSError, ValueError):
        return False


def trainer_checkpoints(work_dir: Path) -> dict[str, dict[int, Path]]:
    """{trainer folder name: {step: checkpoint dir}} of the complete checkpoints under ``work_dir``."""
    found: dict[str, dict[int, Path]] = {}
    if not work_dir.is_dir():
        return found
    for folder in sorted(p for p in work_dir.iterdir() if p.is_dir()):
        for ckpt in folder.iterdir():
            m = _CHECKPOINT.match(ckpt.name)
            if m and ckpt.is_dir() and is_complete(ckpt):
                found.setdefault(folder.name, {})[int(m.group(1))] = ckpt
    return found


def read_attempt(work_dir: Path) -> dict | None:
    try:
        return json.loads((work_dir / ATTEMPT_FILE).read_text())
    except (OSError, ValueError):
        return None


def _write_attempt(work_dir: Path, record: dict) -> None:
    tmp = work_dir / f".{ATTEMPT_FILE}.{uuid.uuid4().hex[:8]}"
    tmp.write_text(json.dumps(record, indent=2))
    os.replace(tmp, work_dir / ATTEMPT_FILE)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _drop_incomplete(work_dir: Path) -> list[Path]:
    dropped = []
    for folder in (p for p in work_dir.iterdir() if p.is_dir()):
        for ckpt in list(folder.iterdir()):
            cut_off = _COPYING.match(ckpt.name) or (_CHECKPOINT.match(ckpt.name) and not is_complete(ckpt))
            if cut_off and ckpt.is_dir():
                shutil.rmtree(ckpt)
                dropped.append(ckpt)
    return dropped


def _adopt(work_dir: Path, key: str) -> list[Path]:
    """Copy the newest complete checkpoint per trainer folder from unfinished attempts at ``key``."""
    newest: dict[str, tuple[int, Path]] = {}
    for marker in work_dir.parent.parent.glob(f"*/{work_dir.name}/{ATTEMPT_FILE}"):
        other = marker.parent
        record = read_attempt(other)
        if other == work_dir or not record or record.get("key") != key or record.get("finished"):
            continue
        for folder, steps in trainer_checkpoints(other).items():
            step = max(steps)
            if step > newest.get(folder, (-1, None))[0]:
                newest[folder] = (step, steps[step])
    adopted = []
    for folder, (step, source) in sorted(newest.items()):
        target = work_dir / folder / source.name
        tmp = work_dir / folder / f".{source.name}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            shutil.copytree(source, tmp)
        except OSError:  # the source attempt is alive after all and rotated it away: start fresh
            shutil.rmtree(tmp, ignore_errors=True)
            continue
        os.replace(tmp, target)
        adopted.append(target)
    return adopted


def start_attempt(work_dir: Path, key: str) -> list[Path]:
    """Mark ``work_dir`` as an attempt at ``key``; return the checkpoints adopted from an
    interrupted attempt (empty when the work directory has its own or none exists)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    _write_attempt(work_dir, {"key": key, "started": _now(), "finished": None})
    _drop_incomplete(work_dir)
    if trainer_checkpoints(work_dir):  # a retry of the same flow run: resume_point finds them itself
        return []
    return _adopt(work_dir, key)


def finish_attempt(work_dir: Path) -> None:
    record = read_attempt(work_dir) or {}
    _write_attempt(work_dir, {**record, "finished": _now()})
