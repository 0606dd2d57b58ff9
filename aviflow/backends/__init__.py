"""Job backends: one documented interface (:class:`Backend`), chosen by entry-point name.

``local`` (process groups on this machine), ``hub`` (a client of the hub's aviflow-api) and
``kubernetes`` (TrainJobs on a cluster with Kueue) ship in the package; others register under the ``aviflow.backends`` entry-point group.
A backend is built from one configuration section with ``from_config``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

from aviflow.backends.base import Backend
from aviflow.errors import BackendError

__all__ = ["Backend", "available", "backend_class", "get_backend"]

BACKEND_ENV = "AVIFLOW_BACKEND"
_BUILTIN = {
    "local": "aviflow.backends.local:LocalBackend",
    "hub": "aviflow.backends.hub:HubBackend",
    "kubernetes": "aviflow.backends.kubernetes:KubernetesBackend",
}


def available() -> dict[str, str]:
    """Backend names and the classes they stand for (``module:Class``)."""
    found = {ep.name: ep.value for ep in entry_points(group="aviflow.backends")}
    found.update(_BUILTIN)  # built-in names always mean the built-in backends
    return found


def _default_name() -> str:
    """``hub`` inside a hub-spawned notebook (it has the service URL and a hub token), else ``local``."""
    from aviflow.backends.hub import API_URL_ENV, TOKEN_ENV

    if os.environ.get(API_URL_ENV) and os.environ.get(TOKEN_ENV):
        return "hub"
    return "local"


def backend_class(name: str) -> type[Backend]:
    """The class registered as ``name``."""
    target = available().get(name)
    if target is None:
        raise BackendError(f"unknown backend {name!r}; available: {', '.join(sorted(available()))}")
    module, _, attr = target.partition(":")
    cls = getattr(__import__(module, fromlist=[attr]), attr)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendError(f"backend {name!r} ({target}) is not an aviflow Backend")
    return cls


def get_backend(
    backend: str | Backend | None = None, config: Mapping[str, Any] | None = None
) -> Backend:
    """A backend instance: given, named, ``$AVIFLOW_BACKEND``, ``hub`` in a hub notebook, or
    ``local``; built from ``config`` (its settings section) when given."""
    if isinstance(backend, Backend):
        return backend
    name = backend or os.environ.get(BACKEND_ENV) or _default_name()
    return backend_class(name).from_config(config)
