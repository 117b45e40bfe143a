"""Checkpoint registry: an MLflow Model Registry, on a local SQLite store or behind an MLflow
tracking server (``paths.registry: http://host:port``, e.g. ``make mlflow``).

Layout under ``root`` (a folder on this machine in both cases)::

    mlflow.db      tracking + model-registry store (sqlite:///<root>/mlflow.db); not used with a server
    artifacts/     artifact root of the training-run experiment (nothing large is written here)
    *.lock, production_history.jsonl   this machine's locks and the promotion history (posttrain.registry.promotion)

Every checkpoint a stage writes becomes one *model version* of the registered model
``model_name``; the weights are never copied.  :meth:`Registry.get` returns the checkpoint directory
as ``source`` with either backend; MLflow's own ``source`` differs, because MLflow validates it only
in the REST server's handler:

* SQLite store: the checkpoint directory itself, a plain absolute path (``SqlAlchemyStore`` accepts
  any string; it only resolves ``models:/`` URIs).
* server: MLflow 3.17's ``_validate_source_run`` rejects a bare local path unless it lies inside the
  artifact directory of the ``run_id`` sent with it.  So a small pointer, ``checkpoint.json`` (path,
  digest, stage, parameters), is logged as an artifact of the stage's run and the version's source
  is that artifact folder (``<run artifact uri>/checkpoints/<digest>``), which the server accepts as
  lying within the run; the checkpoint directory is the version's ``checkpoint_path`` tag.  A version
  registered without a run gets a run of its own for the pointer.

Lineage lives in model-version tags (stage, digest, flow_run, parent_version, dataset versions,
config_hash, code_revision, verifier versions, ...).  Gate outcomes are tags too (``gate``,
``gate_checks``, ``status=rejected``), and the registry alias ``candidate-<stage>`` points at the
newest version of that stage that passed its gate.

Training runs: :meth:`Registry.start_training` opens the stage's run before the stage starts, and
the stage's trainers log to it at every logging step (posttrain.registry.live_metrics), so a long stage is
watched while it runs; the flow closes it when the stage returns (or fails).

Offline: MLflow telemetry is switched off before mlflow is imported (and reset if some other module
imported mlflow first); the client is handed only ``sqlite:`` URIs or the configured server.
Nothing here touches the process-wide fluent API (``mlflow.set_tracking_uri``/``mlflow.start_run``),
so a Registry never changes what other code logs to.

Concurrency: every mutation runs inside :meth:`Registry._mutation`, an exclusive lock on a file in
``root``: it orders the processes of one machine.  Behind a server, writers on other machines are
ordered by the server's store only (a version's look-up and creation are not atomic across machines).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import time
import urllib.request
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

# Must happen before the first `import mlflow`: mlflow/__init__ starts its telemetry client (which
# fetches a remote config in a background thread) at import time.  Forced, not setdefault: this
# pipeline never lets MLflow reach the network.
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
# MLflow prints "View run ... at <url>" to stdout whenever a run on a server ends; the flow logs
# each stage's run link itself (Registry.run_url).
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")

with warnings.catch_warnings():
    # mlflow's SQL store module calls sqlalchemy.orm.configure_mappers() at import time, which
    # under SQLAlchemy 2.1 emits a SADeprecationWarning about `noload` (MLflow's, not ours).
    warnings.filterwarnings("ignore", message=r".*``noload``")
    import mlflow.store.model_registry.sqlalchemy_store  # noqa: E402, F401
    import mlflow.store.tracking.sqlalchemy_store  # noqa: E402, F401

from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from posttrain.schema import CheckpointRef, GateVerdict, TrackingRef  # noqa: E402


def _disable_telemetry() -> None:
    # If mlflow was imported before this module (with telemetry on), drop the client it created.
    with contextlib.suppress(Exception):
        from mlflow.telemetry.client import set_telemetry_client

        set_telemetry_client()


_disable_telemetry()

# "Creating initial MLflow database tables..." / alembic migration chatter on every fresh store.
for _name in ("mlflow.store.db.utils", "mlflow.store.model_registry.abstract_store", "alembic"):
    logging.getLogger(_name).setLevel(logging.WARNING)
_log = logging.getLogger(__name__)

# MLflow's per-call limits for log_batch.
_MAX_METRICS_PER_BATCH = 1000
_MAX_PARAMS_PER_BATCH = 100
_MAX_TAGS_PER_BATCH = 100
_MAX_PARAM_VALUE = 6000

GATE_PASSED = "passed"
GATE_FAILED = "failed"
STATUS_REJECTED = "rejected"


def candidate_alias(stage: str) -> str:
    """Alias that points at the newest gate-passing version of ``stage``."""
    return f"candidate-{stage}"


def metric_name(key: Any) -> str:
    """MLflow accepts only alphanumerics, _ - . space : / in metric names; trainers log others
    (e.g. a sampler bucket "L2*"): each other character becomes its name, so names stay distinct."""
    spelled = {"+": "plus", "-": "-", "*": "times", "%": "pct", "=": "eq", "<": "lt", ">": "gt"}
    return "".join(c if c.isalnum() or c in "_-. :/" else f"_{spelled.get(c, 'x')}_" for c in str(key))


class RegistryUnreachable(RuntimeError):
    """The configured MLflow server does not answer."""


class Registry:
    """Model versions (one per checkpoint) plus one MLflow run per stage execution."""

    def __init__(self, root: Path, model_name: str = "posttrain", server: str | None = None):
        """``root``: this machine's folder (the SQLite store without ``server``, locks and promotion
        history either way); ``server``: an MLflow tracking server URI, http(s)://host:port."""
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.artifact_root = self.root / "artifacts"
        self.model_name = model_name
        self.server = server.rstrip("/") if server else None
        if self.server:
            _check_server(self.server)
            self.uri = self.server
        else:
            self.artifact_root.mkdir(exist_ok=True)
            self.uri = f"sqlite:///{self.root / 'mlflow.db'}"
        # One client for the Registry's lifetime.  Building its stores runs MLflow's schema
        # check; on a new file the full alembic migration (~100 DDL commits: ~1 s on an idle
        # disk, several seconds when fsync is slow).  Done once here, not per call.
        self._experiment_id: str | None = None
        # Two processes opening a new registry at once (a run and `posttrain status`) would both
        # run the schema migration and one fails with "table ... already exists": serialise it.
        with self._mutation():
            self.client = MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)
            self.client.search_experiments(max_results=1)  # forces the store (and its migration) now
        self._ensure_model()
        self._experiment()

    @classmethod
    def for_config(cls, cfg, suffix: str = "") -> "Registry":
        """The registry of a pipeline config, model `posttrain-<name>` (the policy; `suffix`
        `-reward-model`: the chain's reward models): the folder `paths.registry`, or the server it
        names (this machine's locks and promotion history then stay in `<paths.runs>/registry`, the
        folder `make mlflow` serves)."""
        from posttrain.config.pipeline import registry_server

        server = registry_server(cfg.paths.registry)
        name = f"posttrain-{cfg.name}{suffix}"
        if server:
            return cls(cfg.path(cfg.paths.runs) / "registry", model_name=name, server=server)
        return cls(cfg.path(cfg.paths.registry), model_name=name)

    def _ensure_model(self) -> None:
        try:
            self.client.get_registered_model(self.model_name)
            return
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
        with self._mutation():
            try:
                self.client.create_registered_model(self.model_name)
            except MlflowException as exc:  # created meanwhile by another Registry
                if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise

    # -- extension point for locking ---------------------------------------------------------
    @contextlib.contextmanager
    def _mutation(self) -> Iterator[None]:
        """Wraps schema creation and every write: an exclusive lock on a file beside the database,
        so concurrent processes never interleave (SQLite alone would fail them, not queue them)."""
        import fcntl

        with open(self.root / "registry.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # -- model versions --------------------------------------------------------------------------
    def register(
        self,
        stage: str,
        checkpoint: CheckpointRef,
        tags: Mapping[str, str],
        run_id: str | None = None,
    ) -> str:
        """Create a model version whose source is the checkpoint directory; return its number.

        Tags: everything in ``tags`` (lineage) plus ``stage``, ``digest`` and, when known,
        ``num_parameters``.  ``stage``/``digest`` always reflect the arguments.  Tag keys may hold
        alphanumerics, ``_ - . / :`` and spaces (MLflow's rule); values are stringified.
        """
        with self._mutation():
            return self._create_version(stage, checkpoint, tags, run_id)

    def _create_version(self, stage: str, checkpoint: CheckpointRef, tags: Mapping[str, str],
                        run_id: str | None) -> str:
        all_tags = {str(k): _tag_value(v) for k, v in tags.items()}
        all_tags["stage"] = stage
        all_tags["digest"] = checkpoint.digest
        if checkpoint.num_parameters is not None:
            all_tags.setdefault("num_parameters", str(checkpoint.num_parameters))
        path = source = str(Path(checkpoint.path).expanduser().resolve())
        if self.server:
            all_tags["checkpoint_path"] = path
            if run_id is None:  # the pointer needs a run to live in
                run_id = self.client.create_run(self._experiment(), tags={"stage": stage, "kind": "registration"},
                                                run_name=f"{stage}-registration").info.run_id
                self.client.set_terminated(run_id, "FINISHED")
            source = self._pointer(run_id, stage, checkpoint, path)
        mv = self.client.create_model_version(name=self.model_name, source=source,
                                              run_id=run_id, tags=all_tags, await_creation_for=0)
        return str(mv.version)

    def _pointer(self, run_id: str, stage: str, checkpoint: CheckpointRef, path: str) -> str:
        """Log ``checkpoint.json`` (where the weights are) into the run; its folder's URI, the source
        a server accepts for a version of that run."""
        folder = "checkpoints/" + hashlib.sha256(checkpoint.digest.encode()).hexdigest()[:16]
        pointer = {"path": path, "digest": checkpoint.digest, "stage": stage,
                   "num_parameters": checkpoint.num_parameters}
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "checkpoint.json").write_text(json.dumps(pointer, indent=2, sort_keys=True))
            self.client.log_artifact(run_id, str(Path(tmp) / "checkpoint.json"), folder)
        return f"{self.client.get_run(run_id).info.artifact_uri.rstrip('/')}/{folder}"

    def register_once(self, stage: str, checkpoint: CheckpointRef, tags: Mapping[str, str],
                      run_id: str | None = None) -> tuple[str, bool]:
        """(version, created): the version of this stage's checkpoint, registered now unless it
        already is. Look-up and creation happen under one lock, so two runs of one project that
        finish the same stage at once register it once."""
        with self._mutation():
            existing = self.find(stage, checkpoint.digest)
            if existing is not None:
                return existing, False
            return self._create_version(stage, checkpoint, tags, run_id), True

    def register_stage(self, stage: str, checkpoint: CheckpointRef, tags: Mapping[str, str], verdict: GateVerdict,
                       log_training: Callable[[], str | None] | None = None) -> str:
        """The version of a stage's checkpoint, with the gate verdict recorded on it: one version per
        checkpoint however many runs reach it (a cached stage is already registered).
        `log_training` (the MLflow run of the training, returning its id) is called only for a
        checkpoint not yet registered.  A version whose process died between registration and its
        verdict gets the verdict now; a stricter gate rejects a known checkpoint, while a passed
        verdict never overrides a failed one (record_gate refuses)."""
        version = self.find(stage, checkpoint.digest)
        created = False
        if version is not None:
            self.repair(version, checkpoint)
        if version is None:
            run_id = log_training() if log_training else None
            version, created = self.register_once(stage, checkpoint, tags, run_id=run_id)
        recorded = None if created else self.get(version)["tags"].get("gate")
        if created or recorded is None or (not verdict.passed and recorded != GATE_FAILED):
            self.record_gate(version, verdict)
        return version

    def repair(self, version: str, checkpoint: CheckpointRef) -> bool:
        """A version whose checkpoint directory went missing or was altered since registration, when
        a stage recomputed the same checkpoint elsewhere (a new run's folder): the version's directory
        is restored from the recomputed copy, so the version serves what its digest says and
        `promote` accepts it again. True when it was restored."""
        from posttrain.registry.checkpoint import restore_copy

        source = self.get(version)["source"]
        restored = bool(source) and restore_copy(Path(source), checkpoint)
        if restored:
            self.set_tag(version, "restored_from", checkpoint.path)
            _log.warning(f"{self.model_name} version {version}: its checkpoint {source} was missing or altered; "
                         f"restored from the recomputed {checkpoint.path}")
        return restored

    def find(self, stage: str, digest: str) -> str | None:
        """The version registered for this stage's checkpoint digest, if any."""
        return next((v["version"] for v in self.versions() if v["stage"] == stage and v["tags"].get("digest") == digest),
                    None)

    def record_gate(self, version: str, verdict: GateVerdict) -> None:
        """Tag the gate outcome; a pass moves ``candidate-<stage>`` here, a fail rejects.

        Fail-closed: a version already tagged ``status=rejected`` stays rejected (a later passing
        verdict raises ValueError), and a failed verdict removes the candidate alias if it pointed
        at this version.
        """
        version = str(version)
        # via pydantic's JSON encoder: NaN/inf check values become null (strict JSON)
        checks = json.dumps(json.loads(verdict.model_dump_json())["checks"], sort_keys=True)
        alias = candidate_alias(verdict.stage)
        with self._mutation():  # read-check-write: the whole thing goes under the future lock
            mv = self.client.get_model_version(self.model_name, version)
            stage = mv.tags.get("stage")
            if stage != verdict.stage:
                raise ValueError(
                    f"gate verdict is for stage {verdict.stage!r} but version {version} "
                    f"was registered for stage {stage!r}"
                )
            if verdict.passed and mv.tags.get("status") == STATUS_REJECTED:
                raise ValueError(
                    f"version {version} ({stage}) was rejected by an earlier gate; "
                    "it cannot become a candidate"
                )
            set_tag = self.client.set_model_version_tag
            set_tag(self.model_name, version, "gate_checks", checks)
            if verdict.passed:
                set_tag(self.model_name, version, "gate", GATE_PASSED)
                self.client.set_registered_model_alias(self.model_name, alias, version)
            else:
                set_tag(self.model_name, version, "gate", GATE_FAILED)
                set_tag(self.model_name, version, "status", STATUS_REJECTED)
                if self.alias(alias) == version:
                    self.client.delete_registered_model_alias(self.model_name, alias)

    def get(self, version: str) -> dict[str, Any]:
        """``{"version", "stage", "source", "run_id", "tags", "aliases", "created_ms"}``."""
        return _version_dict(self.client.get_model_version(self.model_name, str(version)))

    def versions(self) -> list[dict[str, Any]]:
        """All versions of the model, oldest first (same dicts as :meth:`get`)."""
        # search_model_versions does not fill ModelVersion.aliases (get_model_version does), so
        # take them from the registered model.
        by_version: dict[str, list[str]] = {}
        for alias, v in (self.client.get_registered_model(self.model_name).aliases or {}).items():
            by_version.setdefault(str(v), []).append(alias)
        out: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = self.client.search_model_versions(
                filter_string=f"name = '{_quote(self.model_name)}'",
                max_results=1000,
                page_token=token,
            )
            out.extend(_version_dict(mv, by_version.get(str(mv.version), [])) for mv in page)
            token = page.token
            if not token:
                break
        out.sort(key=lambda d: int(d["version"]))
        return out

    def created_ms(self) -> int:
        """When the registered model was created: it tells two registries' models of one name apart."""
        return int(self.client.get_registered_model(self.model_name).creation_timestamp)

    def alias(self, name: str) -> str | None:
        """Version number the alias points to, or None if the alias is not set."""
        aliases = self.client.get_registered_model(self.model_name).aliases or {}
        version = aliases.get(name)
        return None if version is None else str(version)

    def aliases(self) -> dict[str, str]:
        """Every alias of the model: ``{alias: version}``."""
        aliases = self.client.get_registered_model(self.model_name).aliases or {}
        return {str(k): str(v) for k, v in aliases.items()}

    def set_alias(self, name: str, version: str) -> None:
        """Point alias ``name`` at ``version`` (moving it if it is set elsewhere)."""
        with self._mutation():
            self.client.set_registered_model_alias(self.model_name, name, str(version))

    def delete_alias(self, name: str) -> None:
        """Remove alias ``name``; a no-op if it is not set."""
        with self._mutation():
            if name in self.aliases():
                self.client.delete_registered_model_alias(self.model_name, name)

    def set_tag(self, version: str, key: str, value: Any) -> None:
        """Set one model-version tag (values that are not strings are JSON-encoded)."""
        with self._mutation():
            self.client.set_model_version_tag(self.model_name, str(version), key, _tag_value(value))

    # -- training runs ---------------------------------------------------------------------------
    def log_training(
        self,
        stage: str,
        params: Mapping[str, Any],
        metric_log: list[Mapping[str, Any]],
        tags: Mapping[str, str],
    ) -> str:
        """One MLflow run per stage execution; return its run_id.

        ``metric_log`` rows: ``{"step": int, <metric>: number, ...}``; non-numeric values (and
        bools) are skipped, NaN/inf are kept (MLflow stores them).  Param values that are not
        strings are JSON-encoded and cut to MLflow's 6000-character limit.
        """
        run_id = self.start_training(stage, tags).run_id
        self.finish_training(run_id, params, metric_log)
        return run_id

    def start_training(self, stage: str, tags: Mapping[str, str]) -> TrackingRef:
        """Open the run a stage trains in (RUNNING): the stage's trainers log to it live
        (posttrain.registry.live_metrics); :meth:`finish_training`, :meth:`end_training` or
        :meth:`discard_training` closes it."""
        experiment_id = self._experiment()
        run_tags = {str(k): _tag_value(v) for k, v in tags.items()}
        run_tags["stage"] = stage
        with self._mutation():
            run = self.client.create_run(experiment_id, tags=run_tags, run_name=stage)
        return TrackingRef(uri=self.uri, run_id=run.info.run_id)

    def finish_training(self, run_id: str, params: Mapping[str, Any], metric_log: list[Mapping[str, Any]]) -> None:
        """Log the stage's settings and mark the run FINISHED. ``metric_log`` (rows as in
        :meth:`log_training`) is logged only if nothing reached the run live (a stage without a
        trainer, or one whose live logging failed), so no curve is drawn twice."""
        with self._mutation():
            try:
                now = int(time.time() * 1000)
                plist = [Param(str(k), _param_value(v)) for k, v in params.items()]
                live = self.client.get_run(run_id).data.metrics
                mlist = [] if live else [
                    Metric(metric_name(k), float(v), now, int(row["step"]))
                    for row in metric_log
                    for k, v in row.items()
                    if k != "step" and _is_number(v)
                ]
                for i in range(0, len(plist), _MAX_PARAMS_PER_BATCH):
                    self.client.log_batch(run_id, params=plist[i : i + _MAX_PARAMS_PER_BATCH])
                for i in range(0, len(mlist), _MAX_METRICS_PER_BATCH):
                    self.client.log_batch(run_id, metrics=mlist[i : i + _MAX_METRICS_PER_BATCH])
            except BaseException:
                self.client.set_terminated(run_id, "FAILED")
                raise
            self.client.set_terminated(run_id, "FINISHED")

    def run_url(self, run_id: str) -> str | None:
        """The run's page in the server's UI (None for the SQLite store, which has no UI of its own)."""
        return f"{self.server}/#/experiments/{self._experiment()}/runs/{run_id}" if self.server else None

    def end_training(self, run_id: str, status: str = "FAILED") -> None:
        """Close a run whose stage did not return (``FAILED``, or ``KILLED``)."""
        with self._mutation():
            self.client.set_terminated(run_id, status)

    def end_abandoned_training(self, flow_run: str, status: str = "KILLED", keep: Iterable[str] = ()) -> list[str]:
        """Close the training runs a flow run left RUNNING when its process was killed (nothing
        else would: the UI showed them in progress forever), except those of the stages in ``keep``
        (still running elsewhere); their run ids."""
        runs = self.client.search_runs([self._experiment()],
                                       filter_string=f"tags.flow_run = '{flow_run}' and attributes.status = 'RUNNING'")
        keep = set(keep)
        runs = [run for run in runs if run.data.tags.get("stage") not in keep]
        with self._mutation():
            for run in runs:
                self.client.set_terminated(run.info.run_id, status)
        return [run.info.run_id for run in runs]

    def discard_training(self, run_id: str) -> None:
        """Delete a run in which nothing trained (the stage came from the cache)."""
        with self._mutation():
            self.client.delete_run(run_id)

    def tag_training(self, run_id: str, tags: Mapping[str, str]) -> None:
        """Add tags (the registered version's lineage) to a training run."""
        items = [RunTag(str(k), _tag_value(v)) for k, v in tags.items()]
        with self._mutation():
            for i in range(0, len(items), _MAX_TAGS_PER_BATCH):
                self.client.log_batch(run_id, tags=items[i : i + _MAX_TAGS_PER_BATCH])

    def _experiment(self) -> str:
        if self._experiment_id is None:
            exp = self.client.get_experiment_by_name(self.model_name)
            if exp is None:
                with self._mutation():
                    try:
                        # A server puts artifacts in its own root (served to every client).
                        self._experiment_id = self.client.create_experiment(
                            self.model_name,
                            artifact_location=None if self.server else (self.artifact_root / self.model_name).as_uri(),
                        )
                    except MlflowException as exc:  # created meanwhile by another Registry
                        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                            raise
                        exp = self.client.get_experiment_by_name(self.model_name)
                        assert exp is not None
                        self._experiment_id = exp.experiment_id
            else:
                self._experiment_id = exp.experiment_id
        return self._experiment_id


def _check_server(uri: str) -> None:
    """Fail now, naming the setting, rather than in MLflow's retry loop minutes later."""
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=10) as response:
            response.read()
    except OSError as exc:
        raise RegistryUnreachable(f"the registry server {uri} (paths.registry) does not answer ({exc}); "
                                  "start one with `make mlflow`, or point paths.registry at a folder") from None


def _version_dict(mv, aliases: list[str] | None = None) -> dict[str, Any]:
    tags = dict(mv.tags or {})
    return {
        "version": str(mv.version),
        "stage": tags.get("stage"),
        # the checkpoint directory; MLflow's own source (a pointer artifact behind a server) is model_source
        "source": tags.get("checkpoint_path") or mv.source,
        "model_source": mv.source,
        "run_id": mv.run_id or None,
        "tags": tags,
        "aliases": sorted(mv.aliases or [] if aliases is None else aliases),
        "created_ms": mv.creation_timestamp,
    }


def _quote(name: str) -> str:
    return name.replace("'", "\\'")


def _tag_value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)


def _param_value(v: Any) -> str:
    s = v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)
    return s[:_MAX_PARAM_VALUE]


def _is_number(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float)):
        return True
    try:  # numpy / torch scalars
        float(v)
    except (TypeError, ValueError):
        return False
    return not isinstance(v, (str, bytes))


__all__ = ["Registry", "RegistryUnreachable", "candidate_alias", "GATE_PASSED", "GATE_FAILED", "STATUS_REJECTED"]
