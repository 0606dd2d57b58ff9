"""What the controller reads from the API server beyond its informers' caches: a TrainJob as
the server has it, a LocalQueue's team and ClusterQueue, and the queue positions of a
LocalQueue's pending workloads (Kueue's visibility API, else derived from the Workloads)."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException

from aviflow.k8s import manifests as m
from aviflow.k8s.crd import GROUP, PLURAL, VERSION
from aviflow.k8s.kueue import KUEUE_GROUP, KUEUE_VERSION, pending_workloads
from aviflow.operator._informer import Obj
from aviflow.operator._observe import queue_positions

if TYPE_CHECKING:
    from aviflow.operator._cell import Cell

log = logging.getLogger("aviflow.operator")

POSITIONS_TTL = 1.0
API_TIMEOUT = 30.0  # no call may hold a worker for ever


class ClusterReads:
    def __init__(self, api: Any, custom: Any, cells: dict[str, Cell]) -> None:
        self.api, self.custom, self.cells = api, custom, cells
        self._positions_lock = threading.Lock()
        self._position_cache: dict[tuple[str, str], tuple[float, dict[str, int]]] = {}

    def trainjob(self, namespace: str, name: str) -> Obj | None:
        """The TrainJob as the API server has it (not the cache), or None."""
        try:
            found = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _request_timeout=API_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return found if isinstance(found, dict) else None

    def team_of(self, namespace: str, queue: str) -> str | None:
        """The team whose LocalQueue ``queue`` is (its ``aviflow.dev/team`` label), or None."""
        try:
            lq = self.custom.get_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, "localqueues", queue,
                _request_timeout=API_TIMEOUT,
            )  # fmt: skip
        except ApiException as exc:
            log.info("LocalQueue %s/%s: %s", namespace, queue, exc.reason)
            return None
        labels = (lq.get("metadata") or {}).get("labels") if isinstance(lq, dict) else None
        team = labels.get(m.LABEL_TEAM) if isinstance(labels, dict) else None
        return team if isinstance(team, str) and team else None

    def positions(self, ns: str, queue: str) -> dict[str, int]:
        """1-based positions of the LocalQueue's pending workloads, from Kueue's visibility
        API (read at most once a second per queue), else derived from the Workloads."""
        now = time.monotonic()
        with self._positions_lock:
            cached = self._position_cache.get((ns, queue))
            if cached is not None and now - cached[0] < POSITIONS_TTL:
                return cached[1]
        try:
            pending = pending_workloads(self.api, ns, queue) if queue else None
        except Exception as exc:  # the visibility API is down: Kueue's order from Workloads
            log.warning("queue positions of %s from Kueue's visibility API: %r", queue, exc)
            pending = None
        if pending is not None:
            found = {
                i["metadata"]["name"]: int(i.get("positionInLocalQueue", 0)) + 1 for i in pending
            }
        else:
            derived = queue_positions(self.cells[ns].workloads.items())
            found = {name: pos for (_, name), pos in derived.items()}
        with self._positions_lock:
            self._position_cache[(ns, queue)] = (now, found)
        return found
