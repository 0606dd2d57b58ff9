"""Job backends: one documented interface, chosen by entry-point name.

``local`` (process groups on this machine) ships in the package; others register under
the ``aviflow.backends`` entry-point group.
"""

from __future__ import annotations

import os
from importlib.metadata import entry_points

from aviflow.backends.base import Backend
from aviflow.errors import BackendError

__all__ = ["Backend", "available", "get_backend"]

_BUILTIN = {"local": "aviflow.backends.local:LocalBackend"}


def available() -> dict[str, str]:
    found = dict(_BUILTIN)
    for ep in entry_points(group="aviflow.backends"):
        found[ep.name] = ep.value
    return found


def _default_name() -> str:
    """``hub`` inside a hub-spawned notebook (it has the service URL and a hub token), else ``local``."""
    if (
        os.environ.get("AVIFLOW_API_URL")
        and os.environ.get("JUPYTERHUB_API_TOKEN")
        and "hub" in available()
    ):
        return "hub"
    return "local"


def get_backend(backend: str | Backend | None = None) -> Backend:
    """A backend instance: given, named, ``$AVIFLOW_BACKEND``, ``hub`` in a hub notebook, or ``local``."""
    if isinstance(backend, Backend):
        return backend
    name = backend or os.environ.get("AVIFLOW_BACKEND") or _default_name()
    target = available().get(name)
    if target is None:
        raise BackendError(f"unknown backend {name!r}; available: {', '.join(sorted(available()))}")
    module, _, attr = target.partition(":")
    cls = getattr(__import__(module, fromlist=[attr]), attr)
    return cls()
