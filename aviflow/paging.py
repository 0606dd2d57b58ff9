"""Pages of records: what one read of a backend (one answer of aviflow-api) returns at most,
so a job that logged a million rows costs a reader one page at a time.

A page is a :class:`Batch`: records from a cursor on, the cursor after them and whether more
follow; :func:`read_pages` follows pages; :func:`wire_bytes` is what a record weighs in a
page's byte budget.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

PAGE_ROWS = 1000  # records in a page when the reader does not say
MAX_PAGE_ROWS = 10_000  # the most records a reader may ask for in one page
PAGE_BYTES = 1 << 20  # bytes of records in a page at most, as JSON (see wire_bytes)


@dataclass(frozen=True)
class Batch(Generic[T]):
    """Records read from a cursor on (one page), and the cursor to read from next time.

    Cursors are opaque non-negative integers (byte offsets in the run store); ``0`` is the
    beginning. A reader keeps ``next`` and passes it back as ``since``. ``more``: records
    were already written after ``next`` when this page was read (the page was full), so
    read again at once; false, the page reached the end of what was written.
    :func:`read_pages` follows the pages.
    """

    items: list[T]
    next: int
    more: bool = False


def read_pages(
    read: Callable[[int], Batch[T]], since: int = 0, pages: int | None = None
) -> Batch[T]:
    """The records of the pages ``read(cursor)`` returns from cursor ``since`` on, following
    ``next`` while ``more`` (at most ``pages`` pages; None: until the end): their items in
    order, the cursor after the last page, and whether more remains after it.

    >>> log = [Batch([1, 2], 10, True), Batch([3], 15, True), Batch([], 15, False)]
    >>> read_pages(lambda at: next(b for b in log if b.next > at or not b.more))
    Batch(items=[1, 2, 3], next=15, more=False)
    >>> read_pages(lambda at: next(b for b in log if b.next > at or not b.more), pages=1)
    Batch(items=[1, 2], next=10, more=True)
    """
    items: list[T] = []
    cursor, more, read_so_far = since, True, 0
    while more and (pages is None or read_so_far < pages):
        page = read(cursor)
        items += page.items
        read_so_far += 1
        if page.next <= cursor and page.more:  # a page that does not move on: stop here
            break
        cursor, more = page.next, page.more
    return Batch(items, cursor, more)


def wire_bytes(record: Any) -> int:
    """Bytes ``record.to_dict()`` takes in a JSON answer (``json.dumps``' defaults, as
    aviflow-api writes them) with the ``", "`` after it: what :data:`PAGE_BYTES` counts.

    >>> from aviflow.records import MetricRow
    >>> wire_bytes(MetricRow(1, 2.0, 1, {"loss": 0.5}))
    65
    """
    return len(json.dumps(record.to_dict())) + 2
