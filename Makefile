# `make run`: set up (if needed) and run the whole pipeline on the embedded default.
# `make test`: set up (if needed) and run the test suite (`make test-all`: with the slow end-to-end tests).
# `make ui`: the Prefect UI and deployments; `make mlflow`: the registry's MLflow server and UI.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export DVC_NO_ANALYTICS := 1
export PREFECT_HOME := $(CURDIR)/.prefect
export PYTHONUNBUFFERED := 1

.PHONY: setup run test test-all clean ui mlflow

$(VENV)/.installed: pyproject.toml scripts/install.py
	test -x $(PY) || python3 -m venv $(VENV)
	# torch first: the pinned CPU build; an unpinned torch would pull a multi-GB CUDA build.
	$(PY) scripts/install.py torch==2.13.0
	$(PY) scripts/install.py -e '.[dev,mlflow-server]'
	$(PY) -m pip check
	$(PY) -c "import torch, trl, prefect, dvc, mlflow; print('installed: torch', torch.__version__, 'trl', trl.__version__)"
	touch $@

setup: $(VENV)/.installed

# The whole chain runs even past a failed gate (the run still exits non-zero and the report card
# marks the gate FAILED and the checkpoint rejected), so one `make run` shows every stage.
run: setup
	$(VENV)/bin/posttrain run --config configs/default.yaml --on-gate-failure continue

test: setup
	$(PY) -m pytest -q -m "not slow"

test-all: setup
	$(PY) -m pytest -q

# `make ui`: a local Prefect server (127.0.0.1:4200, SQLite under .prefect/) plus the served
# deployments (pipeline, promote, rollback, evaluate: flows/serve.py). Ctrl-C stops both: the server
# runs in its own session so that Ctrl-C reaches only `serve`, which pauses its deployments through
# the still-running server before the server is stopped.
UI_PORT ?= 4200
ui: setup
	@mkdir -p .prefect
	@export PREFECT_API_URL=http://127.0.0.1:$(UI_PORT)/api; \
	health() { $(PY) -c "import sys, urllib.request; urllib.request.urlopen('$$PREFECT_API_URL/health', timeout=2); sys.exit(0)" 2>/dev/null; }; \
	server=; \
	trap 'true' INT TERM; \
	if health; then echo "using the Prefect server already on 127.0.0.1:$(UI_PORT)"; else \
	  setsid $(VENV)/bin/prefect server start --host 127.0.0.1 --port $(UI_PORT) --analytics-off > .prefect/server.log 2>&1 & server=$$!; \
	  trap 'kill $$server 2>/dev/null; wait $$server 2>/dev/null' EXIT; \
	  for i in $$(seq 1 120); do health && break; kill -0 $$server 2>/dev/null || { cat .prefect/server.log; exit 1; }; sleep 1; done; \
	  health || { echo "Prefect server did not become healthy (see .prefect/server.log)"; exit 1; }; \
	fi; \
	echo "Prefect UI: http://127.0.0.1:$(UI_PORT)"; \
	echo "stages with run_on need a worker on their pool: PREFECT_API_URL=$$PREFECT_API_URL $(VENV)/bin/prefect worker start --pool <pool>"; \
	$(PY) -m flows.serve

# `make mlflow`: an MLflow tracking server and UI on 127.0.0.1:$(MLFLOW_PORT) over the registry the
# pipeline writes by default (the SQLite store runs/registry/mlflow.db; artifacts served from
# runs/registry/artifacts), from the `mlflow-server` extra, installed here if missing. A config
# registers through it with `paths.registry: http://127.0.0.1:$(MLFLOW_PORT)`. One worker, and no job
# runner (MLflow's GenAI jobs, a pool of processes this pipeline never uses); telemetry off.
MLFLOW_PORT ?= 5000
MLFLOW_STORE ?= runs/registry
mlflow: setup
	@$(PY) -c "import importlib.metadata as m; m.version('mlflow')" 2>/dev/null || $(PY) scripts/install.py -e '.[mlflow-server]'
	@mkdir -p $(MLFLOW_STORE)/artifacts
	@echo "MLflow UI: http://127.0.0.1:$(MLFLOW_PORT) (store $(MLFLOW_STORE)/mlflow.db; Ctrl-C stops it)"
	MLFLOW_DISABLE_TELEMETRY=true MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(VENV)/bin/mlflow server \
	  --host 127.0.0.1 --port $(MLFLOW_PORT) --workers 1 \
	  --backend-store-uri sqlite:///$(abspath $(MLFLOW_STORE))/mlflow.db \
	  --artifacts-destination $(abspath $(MLFLOW_STORE))/artifacts

clean:
	rm -rf runs .prefect
