"""A queue as a bar and a line of words: one builder for every place that shows a queue.

aviflow-api's pages (:mod:`aviflow_hub.service.page_html`) render the
:class:`~aviflow.records.QueueQuota` record through :func:`queue_bar`; the JupyterLab sidebar
mirrors it in TypeScript (``extensions/labextension/src/queuebar.ts``), and both are tested on
the same samples (``extensions/labextension/test/queue_bar_samples.json``), so the two cannot
drift. Pure. The bar's scale is the larger of the nominal quota and the GPUs in use plus those
the waiting jobs ask for; its segments are the GPUs in use within the quota, those borrowed
beyond it from the cohort, and those the waiting jobs ask for, in percent of the scale
(rounded half up to hundredths, as the mirror rounds); the quota is a mark at ``quota_pct``.
A record's numbers are only as sound as what reported them: negatives count as 0, and a queue
borrows at most what it holds.

>>> from aviflow.records import PendingJob, QueueQuota
>>> bar = queue_bar(QueueQuota("vision", 4, gpus_in_use=5, pending_count=1, borrowed=2,
...                            pending=(PendingJob("w-1", "bob", 1, 3),), lendable=4))
>>> bar.label
'5 / 4 GPUs · 1 pending · 2 borrowed · 4 idle in cohort'
>>> bar.in_quota_pct, bar.borrowed_pct, bar.pending_pct, bar.quota_pct
(37.5, 25.0, 37.5, 50.0)
>>> waiting_rows(QueueQuota("vision", 4, pending=(PendingJob("w-1", "bob", 1, 3),)), most=10)
([WaitingRow(position=1, user='bob', id='w-1', gpus=3)], 0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from aviflow.records import QueueQuota


def _pct(part: int, whole: int) -> float:
    """``part`` in percent of ``whole``, half up to hundredths (JavaScript's ``Math.round``)."""
    return math.floor(part / whole * 10000 + 0.5) / 100 if whole > 0 else 0.0


def pct_css(value: float) -> str:
    """A width as CSS, written as JavaScript writes the number: ``37.5%``, ``50%``.

    >>> pct_css(50.0), pct_css(33.33), pct_css(0.0)
    ('50%', '33.33%', '0%')
    """
    return f"{value:g}%"


@dataclass(frozen=True)
class QueueBar:
    """What a view shows of one queue (see the module docstring); ``quota_pct`` None: no quota."""

    queue: str
    in_quota_pct: float
    borrowed_pct: float
    pending_pct: float
    quota_pct: float | None
    label: str

    def to_dict(self) -> dict[str, Any]:
        """As the TypeScript mirror's ``QueueBar`` (the samples' form)."""
        return {
            "queue": self.queue,
            "inQuotaPct": self.in_quota_pct,
            "borrowedPct": self.borrowed_pct,
            "pendingPct": self.pending_pct,
            "quotaPct": self.quota_pct,
            "label": self.label,
        }


def queue_bar(q: QueueQuota) -> QueueBar:
    """The bar and the words of one queue."""
    in_use = max(0, q.gpus_in_use)
    borrowed = min(max(0, q.borrowed), in_use)
    lendable = max(0, q.lendable)
    pending_gpus = sum(max(0, p.gpus) for p in q.pending)
    quota = q.gpu_quota
    scale = max(quota or 0, in_use + pending_gpus)
    parts = [f"{in_use} GPUs · no quota limit" if quota is None else f"{in_use} / {quota} GPUs"]
    if q.pending_count > 0:
        parts.append(f"{q.pending_count} pending")
    if borrowed > 0:
        parts.append(f"{borrowed} borrowed")
    if lendable > 0:
        parts.append(f"{lendable} idle in cohort")
    return QueueBar(
        queue=q.queue,
        in_quota_pct=_pct(in_use - borrowed, scale),
        borrowed_pct=_pct(borrowed, scale),
        pending_pct=_pct(pending_gpus, scale),
        quota_pct=None if quota is None else _pct(quota, scale),
        label=" · ".join(parts),
    )


@dataclass(frozen=True)
class WaitingRow:
    """One waiting job of a queue as a list shows it: ``1. bob w-1 (3 GPUs)``."""

    position: int
    user: str
    id: str
    gpus: int


def waiting_rows(q: QueueQuota, most: int) -> tuple[list[WaitingRow], int]:
    """The first ``most`` waiting jobs the reader may see, first in line first, and how many
    more there are."""
    rows = [WaitingRow(p.position, p.user, p.id, max(0, p.gpus)) for p in q.pending[:most]]
    return rows, max(0, len(q.pending) - most)
