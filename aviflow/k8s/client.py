"""A ``kubernetes`` API client from a kubeconfig or the pod's service account (I/O)."""

from __future__ import annotations

import os
from typing import Any

from aviflow.errors import BackendError


def api_client(
    kubeconfig: str | None = None, context: str | None = None, connections: int | None = None
) -> Any:
    """A new ``kubernetes.client.ApiClient``: from ``kubeconfig`` (default: ``KUBECONFIG``
    or ``~/.kube/config``) when one exists, else in-cluster (the service account).
    ``connections``: how many it keeps open to the API server at once (the client's default
    is 5 per CPU; a caller with more threads in calls, each watch holding one, says so)."""
    try:
        from kubernetes import client, config
    except ImportError:
        raise BackendError(
            "the kubernetes backend needs the 'kubernetes' package: pip install 'aviflow[k8s]'"
        ) from None
    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        if kubeconfig or os.path.exists(path):
            config.load_kube_config(
                config_file=path, context=context, client_configuration=configuration
            )
        else:
            config.load_incluster_config(client_configuration=configuration)
    except (config.ConfigException, OSError) as exc:
        raise BackendError(
            f"cannot configure a Kubernetes client ({exc}); set 'kubeconfig' in the kubernetes "
            "settings or KUBECONFIG, or run inside the cluster"
        ) from None
    if connections is not None:
        configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)
