"""pytest plugin exposing the real test cluster to any test module.

Fixtures
--------
``k8s_cluster`` (session)
    A running :class:`aviflow_testcluster.Cluster`: etcd, kube-apiserver,
    kube-controller-manager, kube-scheduler, Kueue (webhooks live) and the node
    agent with 4 HGX nodes (``hgx-0..3``: 8 ``nvidia.com/gpu`` each, tainted
    ``nvidia.com/gpu=present:NoSchedule``) and 2 CPU nodes (``cpu-0..1``).
    Useful members: ``.kubeconfig`` (path), ``.api_client()`` (a new
    ``kubernetes.client.ApiClient``), ``.kubectl(*args, input=None, check=True)``
    (a ``CompletedProcess``), ``.create_namespace()``, ``.read_logs(ns, pod)``,
    ``.processes()``, ``.workdir`` (component logs under ``logs/``, pod sandboxes
    under ``agent/pods/<ns>/<pod>/``).
    Under pytest-xdist the workers share one cluster; the last worker out stops it.
``k8s_namespace`` (function)
    A fresh namespace (default ServiceAccount ready) deleted after the test.

Binaries are built on first use (``tests/cluster/.build``, keyed on go.sum). The
build runs at collection time when a collected test needs ``k8s_cluster`` so a
cold build (tens of minutes) is not charged to a test's timeout.

To expose the fixtures to every test, ``tests/conftest.py`` contains::

    sys.path.insert(0, str(Path(__file__).resolve().parent / "cluster"))
    pytest_plugins = ["aviflow_testcluster.pytest_plugin"]

(the project runs pytest with ``--import-mode=importlib``, which puts no test
directory on ``sys.path``). Inside ``tests/cluster`` the local ``conftest.py``
registers the same plugin unless it already is, so there is one cluster either
way. This module is an alternative entry point (``-p plugin`` from this folder).
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

PLUGIN = "aviflow_testcluster.pytest_plugin"


def register(config) -> None:
    """Register the fixtures once, whichever conftest asks first."""
    if not config.pluginmanager.has_plugin(PLUGIN):
        config.pluginmanager.import_plugin(PLUGIN)


def pytest_configure(config) -> None:
    register(config)
