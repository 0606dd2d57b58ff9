# Make fragment for the real test cluster (tests/cluster). Included by the top Makefile:
#   include tests/cluster/cluster.mk
#
#   make cluster-build   build/check the binaries (cached; cold build is long, see README)
#   make helm            build/check the helm CLI (cached) and print its path
#   make kubectl         build/check the binaries and print kubectl's path
#   make cluster-up      start a cluster in .cluster/ and print `export KUBECONFIG=...`
#   make cluster-down    stop it and check no process is left
#   make cluster-status  show pids/ports of the running cluster
#   make test-cluster    run the cluster smoke tests
#   make cluster-aviflow Aviflow on it (CRD, queues, run store) and the controller
#   make cluster-chart   the Helm chart on it, with the built images (make images)

CLUSTER_PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
CLUSTER_DIR ?= .cluster
CLUSTER_CLI = PYTHONPATH=tests/cluster$(if $(PYTHONPATH),:$(PYTHONPATH)) GOTOOLCHAIN=local \
	$(CLUSTER_PYTHON) -m aviflow_testcluster

.PHONY: cluster-build cluster-up cluster-down cluster-status test-cluster helm kubectl

cluster-build:
	$(CLUSTER_CLI) build

helm:
	@$(CLUSTER_CLI) helm

kubectl:
	@echo "$$($(CLUSTER_CLI) build 2>/dev/null)/kubectl"

# Host mode: pods whose image `make images` has not built run on this machine's Python.
cluster-up:
	@$(CLUSTER_CLI) up --host-mode --dir $(CLUSTER_DIR)

cluster-down:
	@$(CLUSTER_CLI) down --dir $(CLUSTER_DIR)

cluster-status:
	@$(CLUSTER_CLI) status --dir $(CLUSTER_DIR)

test-cluster:
	$(CLUSTER_PYTHON) -m pytest tests/cluster -m cluster $(PYTEST_ARGS)

# Aviflow on the running cluster: CRD, queues, run store, and the controller in the foreground
.PHONY: cluster-aviflow
cluster-aviflow:
	$(CLUSTER_PYTHON) tools/cluster_aviflow.py

# The Helm chart on the running cluster with the built images (make cluster-up, make images)
.PHONY: cluster-chart
cluster-chart:
	$(CLUSTER_PYTHON) tools/cluster_chart.py
