"""Cluster tests: a real control plane with Kueue and fake HGX nodes.

Fixtures (registered from ``aviflow_testcluster.pytest_plugin``; see ``plugin.py``):

``k8s_cluster`` (session)
    The running :class:`aviflow_testcluster.Cluster`. ``.kubeconfig``,
    ``.api_client()``, ``.kubectl(*args, input=None, check=True)``,
    ``.create_namespace()``, ``.read_logs(namespace, pod, container=None)``,
    ``.processes()``, ``.stop()``. Built on first use from pinned Go modules.
``k8s_namespace`` (function)
    A fresh namespace with its default ServiceAccount, deleted afterwards.

Every test here is marked ``cluster``; deselect them with ``-m "not cluster"``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

PLUGIN = "aviflow_testcluster.pytest_plugin"


def pytest_configure(config) -> None:
    # tests/conftest.py may already have registered it (pytest_plugins); once only.
    if not config.pluginmanager.has_plugin(PLUGIN):
        config.pluginmanager.import_plugin(PLUGIN)
