"""A ``kubernetes`` API client from a kubeconfig or the pod's service account (I/O).

:func:`api_client` with a ``timeout`` (:class:`~aviflow.k8s.settings.ApiTimeout`) gives every
call made through the client that names no ``_request_timeout`` of its own that timeout, and
retries a call only when the connection could not be made (once): a call to an API server
that stops answering fails after ``connect`` (twice) plus ``read`` seconds, never later.
:func:`unreachable` turns what the client raises then into a
:class:`~aviflow.errors.BackendUnavailable` (HTTP 503 in aviflow-api); :func:`may_have_arrived`
says whether the request may have reached the API server all the same (a create whose answer
was lost may have been applied).
"""

from __future__ import annotations

import os
from functools import cache
from typing import TYPE_CHECKING, Any

from aviflow.errors import BackendError, BackendUnavailable

if TYPE_CHECKING:
    from aviflow.k8s.settings import ApiTimeout


def api_client(
    kubeconfig: str | None = None,
    context: str | None = None,
    connections: int | None = None,
    timeout: ApiTimeout | None = None,
) -> Any:
    """A new ``kubernetes.client.ApiClient``: from ``kubeconfig`` (default: ``KUBECONFIG``
    or ``~/.kube/config``) when one exists, else in-cluster (the service account).
    ``connections``: how many it keeps open to the API server at once (the client's default
    is 5 per CPU; a caller with more threads in calls, each watch holding one, says so).
    ``timeout``: the default timeout of every call (see the module docstring)."""
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
    if timeout is None:
        return client.ApiClient(configuration)
    from urllib3.util.retry import Retry

    # a connection that could not be made is tried once more; a request sent is never sent
    # again (a PATCH or POST may have been applied), nor one whose answer did not come in time
    configuration.retries = Retry(total=2, connect=1, read=0, redirect=0)
    return _timed_client_class()(configuration, (timeout.connect, timeout.read))


@cache
def _timed_client_class() -> type:
    from kubernetes import client

    class TimedApiClient(client.ApiClient):
        """An ``ApiClient`` whose calls without a ``_request_timeout`` get ``timeout``."""

        def __init__(self, configuration: Any, timeout: tuple[float, float]) -> None:
            super().__init__(configuration)
            self.request_timeout = timeout

        def call_api(self, *args: Any, **kw: Any) -> Any:
            if kw.get("_request_timeout") is None:
                kw["_request_timeout"] = self.request_timeout
            return super().call_api(*args, **kw)

    return TimedApiClient


def unreachable(exc: BaseException, what: str, api: Any) -> BackendUnavailable | None:
    """The BackendUnavailable for ``exc`` when it says the API server could not be reached
    or did not answer in time (urllib3's errors, which the client passes on); else None."""
    import urllib3

    if not isinstance(exc, urllib3.exceptions.HTTPError):
        return None
    errors = urllib3.exceptions
    reason = getattr(exc, "reason", None) or exc  # MaxRetryError: what the last try hit
    host = getattr(getattr(api, "configuration", None), "host", None) or "the API server"
    timeout = getattr(api, "request_timeout", None)
    connect, read = timeout if isinstance(timeout, tuple) else (None, None)
    if isinstance(reason, errors.NewConnectionError) or not isinstance(reason, errors.TimeoutError):
        # (a refused connection is a NewConnectionError, which urllib3 derives from its timeout)
        problem = f"cannot be reached ({type(reason).__name__}: {str(reason)[:200]})"
    elif isinstance(reason, errors.ConnectTimeoutError):
        waited = f" within {connect:g} s" if connect else ""
        problem = f"did not take the connection{waited} ({type(reason).__name__})"
    else:
        waited = f" within {read:g} s" if read else ""
        problem = f"did not answer{waited} ({type(reason).__name__})"
    return BackendUnavailable(
        f"{what}: the Kubernetes API server at {host} {problem}; try again in a minute. "
        "If it goes on, ask an admin to check the API server and the network to it (the "
        "kubernetes settings' apiTimeout: how long a call may wait)"
    )


def may_have_arrived(exc: BaseException) -> bool:
    """False only when ``exc`` says the request was never sent: the connection was refused
    or not made in time. A request whose answer did not come, or whose connection broke
    after it was sent, may have been applied.

    >>> import urllib3
    >>> may_have_arrived(urllib3.exceptions.NewConnectionError(None, "refused"))
    False
    >>> may_have_arrived(urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out"))
    True
    """
    import urllib3

    errors = urllib3.exceptions
    reason = getattr(exc, "reason", None) or exc  # MaxRetryError: what the last try hit
    return not isinstance(reason, errors.NewConnectionError | errors.ConnectTimeoutError)
