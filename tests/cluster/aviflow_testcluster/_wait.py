"""``wait_for``: poll a predicate until it is truthy (tests on a live cluster)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    pred: Callable[[], T], timeout: float = 60, what: str = "condition", interval: float = 0.2
) -> T:
    """The first truthy value of ``pred()``; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
