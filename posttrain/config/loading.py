"""Loading the pipeline config: YAML layers merged, validated by pydantic (posttrain.config.pipeline),
errors that name the field with its file and line, credentials masked, the config's hash."""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
from pathlib import Path

from pydantic import BaseModel, ValidationError

from posttrain.config.pipeline import ConfigError, PipelineConfig
from posttrain.config.yamlconfig import (
    YamlConfigError,
    clip,
    layer_of,
    merge_layers,
    read_layers,
    short,
)


def config_hash(model: BaseModel) -> str:
    blob = json.dumps(model.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


MAX_LISTED_ERRORS = 20


def without_credentials(text: str) -> str:
    """`text` with the user:password of any URI in it masked: a config error is printed and logged."""
    return re.sub(r"(?<=://)[^/@\s'\"]*@", "***@", text)


def _format_errors(errors: list[dict], source: str, where=None) -> str:
    """One line per error, `<where>: field: message (got value)`, where `where(loc)` says the file
    and line of the field (default: the file); values and messages capped, at most 20 errors."""
    lines = [f"invalid config {source}:"]
    for e in errors[:MAX_LISTED_ERRORS]:
        field = ".".join(str(p) for p in e["loc"]) or "<top level>"
        got = "" if e["type"] == "missing" or isinstance(e.get("input"), dict) else f" (got {without_credentials(short(e.get('input')))})"
        lines.append(f"  - {where(tuple(e['loc'])) if where else source}: {field}: {clip(without_credentials(e['msg']), 1000)}{got}")
    if len(errors) > MAX_LISTED_ERRORS:
        lines.append(f"  ... and {len(errors) - MAX_LISTED_ERRORS} more")
    return "\n".join(lines)


def _non_finite(value, loc: tuple = ()) -> list[dict]:
    """NaN/inf numbers anywhere in a validated config, as pydantic errors: models defined outside
    this module (world, architecture, pretraining) do not inherit Strict's allow_inf_nan=False."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [{"loc": loc, "type": "finite_number", "input": value,
                                                  "msg": "Input should be a finite number"}]
    if isinstance(value, BaseModel):
        return [p for name in type(value).model_fields for p in _non_finite(getattr(value, name), (*loc, name))]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _non_finite(v, (*loc, i))]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _non_finite(v, (*loc, k))]
    return []


CONFIG_DIRS_ENV = "POSTTRAIN_CONFIG_DIRS"


def served_config_path(config_path: str, project_root: Path) -> Path:
    """The config a served deployment may read: relative paths resolve against the project, and
    when the server's settings restrict them (POSTTRAIN_CONFIG_DIRS, `os.pathsep`-separated; `make
    ui` sets it to the project's configs/), the resolved file (symlinks followed) must lie inside
    one of those folders. Refused before the file is opened, so no error echoes its contents."""
    path = Path(config_path) if Path(config_path).is_absolute() else project_root / config_path
    allowed = [Path(d).resolve() for d in os.environ.get(CONFIG_DIRS_ENV, "").split(os.pathsep) if d]
    if allowed and not any(path.resolve().is_relative_to(d) for d in allowed):
        raise ConfigError(f"config_path {clip(str(config_path))} is outside the folders this server reads configs "
                          f"from ({', '.join(map(str, allowed))}; {CONFIG_DIRS_ENV})")
    return path


def load_config(path: str | Path, project_root: Path | None = None, overrides: dict | None = None) -> PipelineConfig:
    """Read YAML (posttrain.config.yamlconfig: one-line errors for unreadable files), apply dotted overrides
    (e.g. {"seed": 3}), validate; a ConfigError names the field and its file:line."""
    path = Path(path)
    try:
        layers = read_layers(path)   # the config, and those it `extends`
    except YamlConfigError as exc:
        raise ConfigError(str(exc)) from None
    data = merge_layers(layers)
    if data is None or data == {}:
        raise ConfigError(f"config {path} is empty: it sets nothing (start from configs/default.yaml)")
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must be a mapping of settings at the top level, "
                          f"not {type(data).__name__} {short(data)}")
    overridden = []
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {dotted}: {key} in config {path} is not a mapping")
        node[leaf] = value
        overridden.append(tuple(dotted.split(".")))

    def where(loc: tuple) -> str:
        if any(loc[:len(o)] == o for o in overridden):
            return f"{path} (override)"
        file, doc = layer_of(layers, loc)
        return str(file) if (line := doc.line(loc)) is None else f"{file}:{line}"

    data.setdefault("root", str((project_root or _project_root_of(path)).absolute()))
    stages = data.get("stages") if isinstance(data.get("stages"), dict) else {}
    placed = {("stages", name) for name, settings in stages.items() if isinstance(settings, dict) and settings.get("run_on")}
    try:
        cfg = validate_config(data, elsewhere=placed)
    except ValidationError as err:
        raise ConfigError(_format_errors(err.errors(), str(path), where)) from None
    from posttrain.config.paths import path_problems

    problems = _non_finite(cfg) + path_problems(cfg)
    if problems:
        raise ConfigError(_format_errors(problems, str(path), where))
    return cfg


def validate_config(data: dict, elsewhere: set[tuple] = frozenset()) -> PipelineConfig:
    """The validated config. A setting this machine cannot run (NotInstalledHere: vLLM, DeepSpeed,
    bitsandbytes missing, no GPU) is an error unless it lies under a location in `elsewhere` (the
    stages placed on a work pool, when the flow loads; on a worker, every part but its stage), where
    the machine that runs that part checks it."""
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as err:
        errors = err.errors()
        if not elsewhere or not all(_machine_problem_elsewhere(e, elsewhere) for e in errors):
            raise
    return PipelineConfig.model_validate(data, context={"skip_machine_checks": True})


def _machine_problem_elsewhere(error: dict, elsewhere: set[tuple]) -> bool:
    from posttrain.config.trainers import NotInstalledHere

    return (isinstance((error.get("ctx") or {}).get("error"), NotInstalledHere)
            and any(tuple(error["loc"][:len(prefix)]) == prefix for prefix in elsewhere))


def _project_root_of(config_path: Path) -> Path:
    """The nearest parent holding pyproject.toml or dvc.yaml, else the config's own directory."""
    for parent in [config_path.absolute().parent, *config_path.absolute().parents]:
        if (parent / "pyproject.toml").exists() or (parent / "dvc.yaml").exists():
            return parent
    return config_path.absolute().parent
