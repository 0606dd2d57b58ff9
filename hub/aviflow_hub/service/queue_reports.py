"""The backend's own view of the queues, read in the background for aviflow-api's queue record.

aviflow-api's queues come from the ledger (:func:`aviflow_hub.service.queues.queue_quotas`),
so they answer while the backend stalls; what only the backend knows, the GPUs a queue
borrows from its cohort (Kueue's ClusterQueue status), comes from the last
:meth:`~aviflow.backends.base.Backend.queues` that :meth:`QueueReports.refresh` read. The
service refreshes it every :data:`REFRESH_EVERY` seconds in a lane of its own, for backends
that declare ``reports_borrowing``; a refresh that fails keeps the last view and is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType

from aviflow.backends.base import Backend
from aviflow.errors import AviflowError
from aviflow.records import QueueQuota

log = logging.getLogger("aviflow_hub.service")
REFRESH_EVERY = 10.0  # seconds


class QueueReports:
    """The last queue records the backend reported, by queue name."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._latest: Mapping[str, QueueQuota] = MappingProxyType({})
        self.failures = 0  # refreshes that failed in a row

    def refresh(self) -> None:
        """Read the backend's queues (blocks: run it in a lane); on a backend error keep the
        last view and log why."""
        try:
            found = self.backend.queues()
        except AviflowError as exc:
            self.failures += 1
            log.warning("reading the backend's queues failed (%d in a row): %s", self.failures, exc)
            return
        self.failures = 0
        self._latest = MappingProxyType({q.queue: q for q in found})

    def latest(self) -> Mapping[str, QueueQuota]:
        """The last view read (empty before the first), never waiting on the backend."""
        return self._latest
