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


def get_backend(backend: str | Backend | None = None) -> Backend:
    """A backend instance: given, named, ``$AVIFLOW_BACKEND``, or ``local``."""
    if isinstance(backend, Backend):
        return backend
    name = backend or os.environ.get("AVIFLOW_BACKEND") or "local"
    target = available().get(name)
    if target is None:
        raise BackendError(f"unknown backend {name!r}; available: {', '.join(sorted(available()))}")
    module, _, attr = target.partition(":")
    cls = getattr(__import__(module, fromlist=[attr]), attr)
    return cls()
