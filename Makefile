# The two commands: `make demo` and `make test`. Both set up .venv first and reuse it.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= train,notebook,hub,k8s,uitest,test
STAMP := $(VENV)/.aviflow-installed
UV_VERSION := 0.13.8
PYTEST_ARGS ?=

.PHONY: venv demo test lint format sysdeps bench bench-admission clean
.PHONY: hub

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(VENV)/bin/uv --version 2>/dev/null | grep -q $(UV_VERSION) || $(PY) -m pip install -q uv==$(UV_VERSION)
	$(VENV)/bin/uv pip install --python $(PY) -c constraints.txt -e '.[$(EXTRAS)]'
	@touch $@

venv: $(STAMP)

# System packages and tools the tests drive for real (browser, PostgreSQL, proxy, Go builds).
sysdeps:
	@bash tools/sysdeps.sh

# The local JupyterHub with aviflow-api (see README "Hub"); log in at http://127.0.0.1:8000.
hub: venv sysdeps
	$(PY) -m aviflow_hub.local --config hub/local.yaml

demo: venv
	$(PY) -m aviflow.examples.demo

test: venv sysdeps lint
	$(PY) -m pytest $(PYTEST_ARGS)

# ruff (lint and format) on everything, mypy --strict on the core package (pyproject.toml)
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: venv
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: venv
	$(PY) bench/import_magic.py
	$(PY) bench/panel.py
	$(PY) bench/launch.py

# TrainJob admission on the test control plane vs plain Kueue Jobs (builds it on first use)
bench-admission: venv
	$(PY) bench/admission.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# make cluster-up / cluster-down / cluster-build / test-cluster (tests/cluster/README.md)
include tests/cluster/cluster.mk
