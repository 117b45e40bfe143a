"""Serve the pipeline and the operations flows as deployments, triggerable from the Prefect UI.

    make ui                  # starts a local Prefect server (127.0.0.1:4200) and runs this module
    python -m flows.serve    # with PREFECT_API_URL pointing at a running server

Deployments (flow name / deployment name):

    posttrain-pipeline/pipeline   the whole chain (flows.pipeline.pipeline)
    posttrain-promote/promote     move the production alias (posttrain.registry.promotion.promote)
    posttrain-rollback/rollback   move it back (posttrain.registry.promotion.rollback)
    posttrain-evaluate/evaluate   evaluate a registered version against production; with
                                  auto_rollback, judge a new production against the previous one
                                  and roll back on a significant regression (posttrain.registry.versus_production)

Promote and rollback record ``flow-run:<id>`` as the actor in the production history and publish
the history as a markdown artifact (key ``production-history``); evaluate publishes a table
artifact (key ``evaluation``).  Stopping this process pauses the deployments (Prefect's serve).
"""
from __future__ import annotations

import os
from typing import Annotated

from pydantic import Field

from flows import PROJECT_ROOT

os.environ.setdefault("PREFECT_RUNNER_POLL_FREQUENCY", "2")  # UI trigger -> run start in ~2 s

from prefect import flow, get_run_logger, serve  # noqa: E402
from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402
from prefect.runtime import flow_run  # noqa: E402

from flows.pipeline import pipeline  # noqa: E402

ConfigPath = Annotated[str, Field(description="Pipeline YAML, relative to the project or absolute "
                                              "(locates the registry)")]


def _open(config_path: str):
    from posttrain.config.loading import load_config, served_config_path
    from posttrain.registry.model_registry import Registry

    cfg = load_config(served_config_path(config_path, PROJECT_ROOT))
    return cfg, Registry.for_config(cfg)


def _actor() -> str:
    """Who moves production from a served flow, as the history records it."""
    return f"flow-run:{flow_run.get_id()}"


def history_markdown(registry, entry: dict | None = None) -> str:
    from posttrain.registry import promotion

    lines = [f"# Production of `{registry.model_name}`", ""]
    if entry is not None:
        lines += [f"**{entry['action']}**: {entry['from'] or '(none)'} → **{entry['to']}** ({entry['stage']}) "
                  f"by `{entry['actor']}`" + (f" — {entry['reason']}" if entry.get("reason") else ""), ""]
        lines += [f"- overridden: {p}" for p in entry.get("overridden") or []]
        lines.append("")
    lines += ["| at (UTC) | action | from | to | stage | actor | reason |", "|---|---|---|---|---|---|---|"]
    for e in reversed(promotion.history(registry)):
        lines.append(f"| {e['at']} | {e['action']} | {e['from'] or '–'} | {e['to']} | {e.get('stage') or '–'} "
                     f"| {e['actor']} | {(e.get('reason') or '–').replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def _publish_move(registry, entry: dict) -> dict:
    get_run_logger().info(f"production: {entry['from']} -> {entry['to']} ({entry['action']})")
    create_markdown_artifact(key="production-history", markdown=history_markdown(registry, entry),
                             description=f"{entry['action']} to version {entry['to']}")
    return entry


@flow(name="posttrain-promote", log_prints=False)
def promote_flow(
    version: Annotated[str, Field(description="Version number, or a stage name (its candidate-<stage> alias)")],
    reason: Annotated[str | None, Field(description="Why; recorded in the history (required with force)")] = None,
    force: Annotated[bool, Field(description="Promote even if the gate failed or the checkpoint changed")] = False,
    config_path: ConfigPath = "configs/default.yaml",
) -> dict:
    """Move the production alias to a registered version (refuses failed gates and altered checkpoints)."""
    from posttrain.registry import promotion

    _, registry = _open(config_path)
    return _publish_move(registry, promotion.promote(registry, version, reason=reason, force=force, actor=_actor()))


@flow(name="posttrain-rollback", log_prints=False)
def rollback_flow(
    to: Annotated[str | None, Field(description="Version to roll back to (default: the previous production)")] = None,
    reason: Annotated[str | None, Field(description="Why; recorded in the history")] = None,
    force: Annotated[bool, Field(description="Skip the checks on the target (needs a reason)")] = False,
    config_path: ConfigPath = "configs/default.yaml",
) -> dict:
    """Move production back to the previous version (or to a named one)."""
    from posttrain.registry import promotion

    _, registry = _open(config_path)
    return _publish_move(registry, promotion.rollback(registry, to=to, reason=reason, force=force, actor=_actor()))


@flow(name="posttrain-evaluate", log_prints=False)
def evaluate_flow(
    version: Annotated[str, Field(description="Version number, stage name (its candidate) or alias")],
    compare: Annotated[bool, Field(description="Also evaluate production and compare item by item")] = True,
    auto_rollback: Annotated[bool, Field(description=(
        "After a promotion: compare production (VERSION must be it) with the previous production and "
        "roll back if any capability is significantly worse (paired CI); the reason is recorded"))] = False,
    config_path: ConfigPath = "configs/default.yaml",
) -> dict:
    """Evaluate a registered version on the held-out suites; paired comparison with production
    (or, with auto_rollback, with the previous production, rolling back on a significant regression)."""
    from posttrain.registry.versus_production import evaluate_version

    cfg, registry = _open(config_path)
    out = evaluate_version(registry, cfg, version, against_production=compare, auto_rollback=auto_rollback,
                           actor=_actor())
    if out["comparison"] is not None:
        table = [{"metric": r["metric"], f"v{out['version']}": r["new"], f"v{out['against']}": r["old"],
                  "diff": r["diff"], "ci_low": r["low"], "ci_high": r["high"], "paired": r["verdict"]}
                 for r in out["comparison"]]
        description = f"version {out['version']} vs {out['against']}"
    else:
        table = [{"metric": k, f"v{out['version']}": v} for k, v in out["metrics"].items()]
        description = f"version {out['version']}"
    create_table_artifact(key="evaluation", table=table, description=description)
    if out["rollback"] is not None:
        _publish_move(registry, out["rollback"])
    return out


def deployments() -> list:
    return [
        pipeline.to_deployment(name="pipeline", description="The post-training chain with a gate after every stage"),
        promote_flow.to_deployment(name="promote", description=promote_flow.__doc__),
        rollback_flow.to_deployment(name="rollback", description=rollback_flow.__doc__),
        evaluate_flow.to_deployment(name="evaluate", description=evaluate_flow.__doc__),
    ]


def main() -> None:
    # A run triggered from the UI reads configs only from the project's configs/ unless the server's
    # environment names other folders (posttrain.config.loading.served_config_path).
    os.environ.setdefault("POSTTRAIN_CONFIG_DIRS", str(PROJECT_ROOT / "configs"))
    # No run limit by default: a promote or rollback must not wait for a training run to finish.
    limit = os.environ.get("POSTTRAIN_SERVE_LIMIT")
    serve(*deployments(), limit=int(limit) if limit else None)


if __name__ == "__main__":
    main()
