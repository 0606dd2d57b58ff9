"""Batch a widget tree's updates: one ``update`` message per changed widget."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import ipywidgets as w


def descendants(root: w.Widget) -> Iterator[w.Widget]:
    """``root``, its layout and style, and the same for every child, depth first."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        widget = stack.pop()
        if id(widget) in seen:
            continue
        seen.add(id(widget))
        yield widget
        for attr in ("layout", "style"):
            sub = getattr(widget, attr, None)
            if isinstance(sub, w.Widget):
                stack.append(sub)
        stack.extend(c for c in getattr(widget, "children", ()) if isinstance(c, w.Widget))


@contextmanager
def hold_sync_all(root: w.Widget) -> Iterator[None]:
    """``hold_sync()`` on every widget of the tree: changes leave together at the end."""
    with ExitStack() as stack:
        for widget in descendants(root):
            stack.enter_context(widget.hold_sync())
        yield
