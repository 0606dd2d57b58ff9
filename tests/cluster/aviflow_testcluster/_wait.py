"""``wait_for``: poll a predicate until it is truthy (tests on a live cluster)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    pred: Callable[[], T],
    timeout: float = 60,
    what: str | Callable[[], str] = "condition",
    interval: float = 0.2,
) -> T:
    """The first truthy value of ``pred()``; AssertionError naming ``what`` after ``timeout``
    (a callable ``what`` is called then, to describe the state that did not come)."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {said}")
        time.sleep(interval)
