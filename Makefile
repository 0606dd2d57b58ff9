# The two commands: `make demo` and `make test`. Both set up .venv first and reuse it.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= train,notebook,hub,k8s,uitest,test
STAMP := $(VENV)/.aviflow-installed
UV_VERSION := 0.13.8
PYTEST_ARGS ?=
# pytest-xdist workers for make test (0: one process); modules stay on one worker, longest first
PYTEST_WORKERS ?= 2

.PHONY: generate venv demo test lint format sysdeps bench bench-admission bench-controller bench-replay bench-gpu clean lock images images-clean
.PHONY: cache clean-cache
.PHONY: hub labextension

# The JupyterLab extension (extensions/labextension, TypeScript) built with JupyterLab's own
# builder into the server extension's package, then put where Jupyter looks for it in .venv
# (the wheel ships both files the same way: pyproject.toml's data-files).
LABEXT := extensions/labextension
LABEXT_OUT := extensions/aviflow_jupyter/labextension/package.json
LABEXT_SRC := $(wildcard $(LABEXT)/src/*.ts $(LABEXT)/style/*) $(LABEXT)/package.json $(LABEXT)/tsconfig.json
LABEXT_PREFIX := $(VENV)/share/jupyter/labextensions/aviflow-jupyterlab
SERVER_EXT_CONF := $(VENV)/etc/jupyter/jupyter_server_config.d/aviflow_jupyter.json

$(LABEXT)/node_modules/.aviflow-ci: $(LABEXT)/package-lock.json
	cd $(LABEXT) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# (the builder is JupyterLab's: `jupyter-builder` from .venv, matching its shared packages;
# the bundle comes from the build cache when a clone built the same sources: tools/labextension.py)
$(LABEXT_OUT): $(STAMP) $(LABEXT)/node_modules/.aviflow-ci $(LABEXT_SRC) $(LABEXT)/package-lock.json
	$(PY) tools/labextension.py

labextension: $(STAMP) $(LABEXT_OUT)
	rm -rf $(LABEXT_PREFIX) && mkdir -p $(dir $(LABEXT_PREFIX)) $(dir $(SERVER_EXT_CONF))
	cp -r extensions/aviflow_jupyter/labextension $(LABEXT_PREFIX)
	install -m 644 extensions/aviflow_jupyter/config/aviflow_jupyter.json $(SERVER_EXT_CONF)

# .venv installs from the same lock as the images (requirements.lock, `make lock`).
$(STAMP): pyproject.toml requirements.lock
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(VENV)/bin/uv --version 2>/dev/null | grep -q $(UV_VERSION) || $(PY) -m pip install -q uv==$(UV_VERSION)
	$(VENV)/bin/uv pip install --python $(PY) -c requirements.lock -e '.[$(EXTRAS)]'
	@touch $@

venv: $(STAMP)

# Re-pin requirements.lock after a change to pyproject.toml or constraints.txt.
lock:
	@test -x $(VENV)/bin/uv || $(MAKE) venv
	bash tools/lock.sh

# The hub, notebook and trainer images with buildah into images/.build/oci (images/README.md);
# REGISTRY=host/path also pushes them; IMAGES="hub" builds a subset.
IMAGES ?= hub notebook trainer
images: venv labextension sysdeps
	REGISTRY=$(REGISTRY) bash images/build.sh $(IMAGES)

# This checkout's image outputs (images/.build: its layout index, reports, build context, and
# the stores of checkouts from before the shared cache; buildah's keeps mounts: unmount first).
# What builds them is in the build cache (make clean-cache).
images-clean:
	@awk '{print $$2}' /proc/mounts | grep '^$(CURDIR)/images/.build/' | sort -r | xargs -r -n1 umount
	rm -rf images/.build

# The build cache every clone on this machine shares ($$AVIFLOW_CACHE_DIR, else
# $$XDG_CACHE_HOME/aviflow, else ~/.cache/aviflow): the control plane's binaries, helm, the
# images' base, wheelhouse, layer store and layout, unpacked layers. `make cache` shows it.
clean-cache:
	@$(PYTHON) tests/cluster/aviflow_testcluster/_cache.py clean

cache:
	@$(PYTHON) tests/cluster/aviflow_testcluster/_cache.py show

# System packages and tools the tests drive for real (browser, PostgreSQL, proxy, Go builds).
sysdeps:
	@bash tools/sysdeps.sh

# The local JupyterHub with aviflow-api (see README "Hub"); log in at http://127.0.0.1:8000.
hub: venv labextension sysdeps
	$(PY) -m aviflow_hub.local --config hub/local.yaml

demo: venv
	$(PY) -m aviflow.examples.demo

test: venv labextension sysdeps lint
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=25 --tb=short \
	  $(PYTEST_ARGS)

# Every generated file, from the definitions it is derived from (a test fails while one is
# stale): the records' OpenAPI schemas, TypeScript types and samples (aviflow.wire_gen), the
# TrainJob CRD (spec model + JobStatus), the spec's flag table, the chart's schema and docs.
generate: venv
	$(PY) -m aviflow.wire_gen
	$(PY) -m aviflow.k8s.crd > aviflow/k8s/trainjobs.aviflow.dev.yaml
	$(PY) -m aviflow.spec_flags > aviflow/spec_flags.json
	$(PY) -m aviflow_hub.chart helm/aviflow

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
	$(PY) bench/rank_exit.py
	$(PY) bench/hostile_reads.py
	$(PY) bench/wire.py

# aviflow-api under N users' sidebars and panels, behind the real hub and proxy
bench-load: venv
	$(PY) bench/api_load.py

# TrainJob admission on the test control plane vs plain Kueue Jobs (builds it on first use)
bench-admission: venv
	$(PY) bench/admission.py

# the controller idle and taking new jobs with 0, 100 and 1,000 finished TrainJobs, as ratios
# (BENCH_ARGS="--history 0,1000,10000", "--compare ../main": another checkout's controller too)
BENCH_ARGS ?=
bench-controller: venv
	$(PY) bench/controller_history.py $(BENCH_ARGS)

# a day of the Philly trace through Kueue: static split per team vs one shared pool, a scan of
# pool sizes, the expected-start estimates' error; writes replay-waits.png (16-24 min on 2 cores;
# BENCH_ARGS="--per-team 75 --hour 3 --scan 0.83,0.67": the whole slice, 20+ min)
bench-replay: venv
	$(PY) bench/replay.py $(BENCH_ARGS)

# the GPU check, for a machine with NVIDIA GPUs (no test needs it; exit 2 without CUDA): the LLM
# recipe on CUDA (FSDP, bf16, NCCL) through aviflow's runtime vs a bare accelerate launch,
# NVML vs nvidia-smi, all-reduce bus bandwidth; BENCH_ARGS="--device cpu": a smoke run here
bench-gpu: venv
	timeout 480 $(PY) bench/gpu.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# make cluster-up / cluster-down / cluster-build / test-cluster (tests/cluster/README.md)
include tests/cluster/cluster.mk
