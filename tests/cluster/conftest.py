"""Cluster tests: a real control plane with Kueue and fake HGX nodes.

Fixtures (``aviflow_testcluster.pytest_plugin``, registered for every test layer by
``tests/conftest.py``):

``k8s_cluster`` (session)
    The running :class:`aviflow_testcluster.Cluster`. ``.kubeconfig``,
    ``.api_client()``, ``.kubectl(*args, input=None, check=True)``,
    ``.create_namespace()``, ``.read_logs(namespace, pod, container=None)``,
    ``.processes()``, ``.stop()``. Built on first use from pinned Go modules.
``k8s_namespace`` (function)
    A fresh namespace with its default ServiceAccount and kube-root-ca.crt, deleted afterwards.

Every test here that needs the cluster is marked ``cluster``; deselect them with
``-m "not cluster"`` (``test_agent_units.py`` tests node-agent parts without one).
"""
