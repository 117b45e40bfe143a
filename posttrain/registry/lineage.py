"""A registered version's chain back to the base model, read from the registry's tags alone
(`posttrain lineage`).

Every version the pipeline registers carries lineage tags (flows/pipeline.py): ``flow_run``,
``config_hash``, ``code_revision``, ``code_dirty``, ``seed``, ``verifiers`` (JSON), ``gate``,
``status``, ``digest``, ``parent_version`` and ``parent_digest``, ``datasets`` (JSON name -> md5 of
the datasets the stage consumed, plus ``"<role> <- <source label>"`` entries for the user sources of
the data roles it read) and ``datasets_produced`` (JSON name -> md5 of the datasets it produced).
A version registered before ``datasets_produced`` existed lists everything of ``datasets`` as
consumed and ``datasets_produced`` as None (unknown).
"""
from __future__ import annotations

import json
from typing import Any

from posttrain.registry.promotion import PromotionError, get_version, resolve_version
from posttrain.registry.model_registry import Registry


def lineage(registry: Registry, version: str) -> list[dict]:
    """The chain from ``version`` (a number, a stage name meaning its candidate, or an alias) back to
    the base model, newest first.

    One dict per version: version, stage, flow_run, config_hash, code_revision, code_dirty,
    verifiers (dict), seed, gate, status, digest, source, parent_version, datasets_consumed /
    datasets_produced (name -> md5; produced None when the version predates that tag), aliases.
    The last element is the base (``version`` "base", its digest from the first stage's
    ``parent_digest``).
    """
    chain: list[dict] = []
    seen: set[str] = set()
    v: str | None = resolve_version(registry, version)
    parent_digest = None
    while v and v != "base":
        if v in seen:
            raise PromotionError(f"parent_version tags form a cycle at version {v}")
        seen.add(v)
        mv = get_version(registry, v)
        t = mv["tags"]
        datasets = _json(t.get("datasets"), {})
        produced = _json(t.get("datasets_produced"), None)
        chain.append({
            "version": v, "stage": mv["stage"], "flow_run": t.get("flow_run"),
            "config_hash": t.get("config_hash"), "code_revision": t.get("code_revision"),
            "code_dirty": t.get("code_dirty"),
            "verifiers": _json(t.get("verifiers"), {}), "seed": t.get("seed"), "gate": t.get("gate"),
            "status": t.get("status"), "digest": t.get("digest"), "source": mv["source"],
            "parent_version": t.get("parent_version"),
            "datasets_consumed": {k: m for k, m in datasets.items() if produced is None or k not in produced},
            "datasets_produced": produced,
            "aliases": mv["aliases"],
        })
        parent_digest = t.get("parent_digest")
        v = t.get("parent_version")
    chain.append({"version": "base", "stage": "base", "digest": parent_digest})
    return chain


def _json(value: str | None, default: Any) -> Any:
    if not value:
        return default
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value
