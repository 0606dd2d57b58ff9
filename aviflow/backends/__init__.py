"""Job backends: one documented interface (:class:`Backend`), chosen by entry-point name.

``local`` (process groups on this machine), ``hub`` (a client of the hub's aviflow-api) and
``kubernetes`` (TrainJobs on a cluster with Kueue) ship in the package; they and any other
package's backends are found only by their ``aviflow.backends`` entry points
(:mod:`._registry`). Each class declares its settings (``settings_model``: the model of its
config section, the hub config's ``api.<name>``) and what it can do (capabilities such as
``reports_borrowing``, ``authorizes_reads``); it is built from its section with
``from_config``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from aviflow.backends._registry import available, backend_class
from aviflow.backends.base import Backend

__all__ = ["Backend", "available", "backend_class", "get_backend"]

BACKEND_ENV = "AVIFLOW_BACKEND"


def _default_name() -> str:
    """``hub`` inside a hub-spawned notebook (it has the service URL and a hub token), else ``local``."""
    from aviflow.backends.hub import API_URL_ENV, TOKEN_ENV

    if os.environ.get(API_URL_ENV) and os.environ.get(TOKEN_ENV):
        return "hub"
    return "local"


def get_backend(
    backend: str | Backend | None = None, config: Mapping[str, Any] | None = None
) -> Backend:
    """A backend instance: given, named, ``$AVIFLOW_BACKEND``, ``hub`` in a hub notebook, or
    ``local``; built from ``config`` (its settings section) when given."""
    if isinstance(backend, Backend):
        return backend
    name = backend or os.environ.get(BACKEND_ENV) or _default_name()
    return backend_class(name).from_config(config)
