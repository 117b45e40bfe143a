"""Offline hygiene: set before Prefect, HF, MLflow or DVC are imported anywhere in the process;
and the machine a result was measured on."""
from __future__ import annotations

import os
import platform
from pathlib import Path

OFFLINE_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_UI_ENABLED": "true",
    "PREFECT_SERVER_API_HOST": "127.0.0.1",
    "DVC_NO_ANALYTICS": "1",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "TOKENIZERS_PARALLELISM": "false",
    "DISABLE_MLFLOW_INTEGRATION": "TRUE",  # we log to MLflow ourselves, with lineage tags
    "WANDB_DISABLED": "true",
}


def configure_offline() -> None:
    for key, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(key, value)


def machine() -> str:
    """The CPU model, cores torch may use and torch build, e.g. "Intel(R) Xeon(R) Processor, 2 cores,
    torch 2.13.0+cpu": float results (so gate verdicts of the tiny default) differ between CPU types,
    so every report says where it ran."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import torch

        build = f", torch {torch.__version__}" + (f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "")
    except ImportError:
        build = ""
    return f"{model}, {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} cores{build}"
