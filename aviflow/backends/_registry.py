"""Backends by name: the ``aviflow.backends`` entry points of the installed packages.

Aviflow registers its own three (``local``, ``hub``, ``kubernetes``) in its package metadata
(``pyproject.toml``) the same way another package registers one, so one lookup finds them all:

.. code-block:: toml

    [project.entry-points."aviflow.backends"]
    slurm = "aviflow_slurm:SlurmBackend"

A name that two packages register for different classes is an error, never a silent pick.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from aviflow.backends.base import Backend
from aviflow.errors import BackendError

GROUP = "aviflow.backends"


def _registered() -> dict[str, list[EntryPoint]]:
    found: dict[str, list[EntryPoint]] = {}
    for ep in entry_points(group=GROUP):
        same = found.setdefault(ep.name, [])
        if all(other.value != ep.value for other in same):
            same.append(ep)
    return found


def available() -> dict[str, str]:
    """Backend names and the classes they stand for (``module:Class``; joined by " or " where
    packages disagree, a name :func:`backend_class` refuses)."""
    return {name: " or ".join(ep.value for ep in eps) for name, eps in _registered().items()}


def _unknown(name: str, known: list[str]) -> BackendError:
    if not known:
        return BackendError(
            f"unknown backend {name!r}: no backend is registered, so aviflow's package metadata "
            "is missing; install the package (pip install -e . in a checkout) rather than only "
            "putting it on PYTHONPATH"
        )
    return BackendError(
        f"unknown backend {name!r}; available: {', '.join(known)} (a package adds one by "
        f"registering it as an {GROUP!r} entry point)"
    )


def backend_class(name: str) -> type[Backend]:
    """The class registered as ``name``."""
    registered = _registered()
    eps = registered.get(name)
    if not eps:
        raise _unknown(name, sorted(registered))
    if len(eps) > 1:
        raise BackendError(
            f"backend {name!r} is registered for several classes: "
            f"{', '.join(sorted(ep.value for ep in eps))}; uninstall all but one of their packages"
        )
    target = eps[0].value
    try:
        cls = eps[0].load()
    except (ImportError, AttributeError) as exc:
        raise BackendError(f"backend {name!r} ({target}) cannot be loaded: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendError(f"backend {name!r} ({target}) is not an aviflow Backend")
    return cls
