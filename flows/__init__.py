"""The orchestration layer: Prefect flows (the chain, the served deployments) and the commands that
drive them (run, resume, the local Prefect server).

Importing this package prepares the process for Prefect before Prefect is imported anywhere in it:
offline defaults (no analytics, servers on 127.0.0.1) and, unless the caller chose one, Prefect's
database kept with the project, so `make ui` shows the runs `make run` made.
"""
import os
from pathlib import Path

from posttrain.env import configure_offline

PROJECT_ROOT = Path(__file__).resolve().parent.parent
configure_offline()
os.environ.setdefault("PREFECT_HOME", str(PROJECT_ROOT / ".prefect"))
