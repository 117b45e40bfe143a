"""Offline hygiene: set before Prefect, HF, MLflow or DVC are imported anywhere in the process."""
from __future__ import annotations

import os

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
