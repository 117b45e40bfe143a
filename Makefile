# `make run`: set up (if needed) and run the whole pipeline on the embedded default.
# `make test`: set up (if needed) and run the test suite.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export DVC_NO_ANALYTICS := 1
export PREFECT_HOME := $(CURDIR)/.prefect
export PYTHONUNBUFFERED := 1

.PHONY: setup run test clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
	# torch first: the pinned CPU build; an unpinned torch would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0 2>&1 | grep -v "is ignored" || true
	$(PY) -m pip install -q -e '.[dev]' 2>&1 | grep -v -e "is ignored" -e "BuildBackendWarning" || true
	$(PY) -m pip check
	$(PY) -c "import torch, trl, prefect, dvc, mlflow; print('installed: torch', torch.__version__, 'trl', trl.__version__)"
	touch $@

setup: $(VENV)/.installed

run: setup
	$(VENV)/bin/posttrain run --config configs/default.yaml

test: setup
	$(PY) -m pytest -q

clean:
	rm -rf runs .prefect
