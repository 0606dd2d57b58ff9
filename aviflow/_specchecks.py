"""Checks of the TrainJob spec's values that its validators share (:mod:`aviflow.spec`)."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from aviflow._units import parse_quantity

Q = TypeVar("Q", bound=int | str | None)


def quantity_at_most(value: Q, maximum: float, hint: str) -> Q:
    """A Kubernetes quantity above zero and at most ``maximum``, kept as given."""
    if value is None:
        return value
    try:
        amount = parse_quantity(value)
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    if not 0 < amount <= maximum:
        raise ValueError(f"{value!r} is out of range; {hint}")
    return value


def check_relative_path(key: str, path: str) -> None:
    """Refuse empty paths and relative paths that climb out of the spec's directory."""
    if not path or "\x00" in path:
        raise ValueError(f"{key}: path is empty or has a NUL byte")
    p = Path(path)
    if not p.is_absolute() and ".." in p.parts:
        raise ValueError(
            f"{key}: {path!r} climbs out of the spec's directory with '..'; give a path inside it or an absolute path"
        )
