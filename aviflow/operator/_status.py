"""A job's status as the controller writes it: in its run directory (``status.json``, read by
the CLI, the notebook and aviflow-api) and on its TrainJob (``kubectl get trainjobs``).

A queued job's position (Kueue's visibility API) and Kueue's reason for its wait reach its
status once it has been queued ``queued_tick`` seconds (since its last QUEUED event): a job
admitted sooner (the pool has room) costs neither the visibility call nor a status patch for
them. A new job's first TrainJob status patch waits ``first_status`` seconds
(``status.json`` at once; the ticker reconciles a TrainJob with no status every ``tick``): a
burst's first reconciles make Jobs, and one admitted by then is patched once (STARTING).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException

from aviflow.k8s.crd import GROUP, PLURAL, VERSION
from aviflow.lifecycle import Lifecycle
from aviflow.operator._informer import Obj
from aviflow.operator._reads import API_TIMEOUT
from aviflow.records import EventType, JobState, JobStatus

if TYPE_CHECKING:
    from aviflow.operator._controller import Controller
    from aviflow.operator._observe import Snapshot
    from aviflow.store import RunDir

log = logging.getLogger("aviflow.operator")
FIRST_STATUS = 1.0  # seconds a new job's first TrainJob status patch waits (see above)


def queued_since(lc: Lifecycle, default: float) -> float:
    """When a queued job was queued last (every way into QUEUED records a QUEUED event:
    submitted, requeued after an eviction, waiting to restart), else ``default``."""
    return next((e.time for e in reversed(lc.events) if e.type is EventType.QUEUED), default)


class Statuses:
    """Writes the statuses of the controller ``ctl``'s jobs, behind its fence
    (``ctl._guard``), and remembers the TrainJob status it patched last, by uid (its
    informer's cache may show the old one for a while)."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self._written: dict[str, dict[str, Any]] = {}  # TrainJob uid -> status last patched

    def forget(self, uid: str) -> None:
        """The TrainJob ``uid`` was deleted."""
        self._written.pop(uid, None)

    def write(
        self, cr: Obj, run: RunDir, lc: Lifecycle, snap: Snapshot, job_id: str, now: float
    ) -> None:
        """The job's status, in its run directory and on its TrainJob (see the module
        docstring for when a queued job's position and reason are read, and when a new
        job's first patch is made)."""
        ctl, ns = self.ctl, cr["metadata"]["namespace"]
        position, message = None, None
        if lc.state is JobState.QUEUED and now - queued_since(lc, now) >= ctl.queued_tick:
            wl = snap.workloads.get(lc.attempt + 1)  # the snapshot found it already
            if wl is not None:
                position = ctl.reads.positions(ns, wl.queue).get(wl.name)
                if wl.pending:
                    message = f"waiting for admission: {wl.pending}"
        expected, wait = ctl.forecast.get(job_id) if lc.state is JobState.QUEUED else (None, None)
        status = lc.status(position, message, expected_start=expected, wait=wait)
        ctl._guard()
        if status != run.status():
            run.write_status(status)
        wire = status.to_dict()
        uid = cr["metadata"]["uid"]
        if (
            lc.state is JobState.QUEUED
            and not cr.get("status")
            and uid not in self._written
            and now - queued_since(lc, now) < ctl.first_status
        ):
            return  # a new job's first patch waits: one admitted by then is patched once
        if (cr.get("status") or {}) == wire or self._written.get(uid) == wire:
            return
        if self._patch(ns, job_id, wire):
            self._written[uid] = wire

    def refuse(self, cr: Obj, message: str) -> None:
        """A TrainJob the controller will not run: FAILED on its status (no run directory),
        and the attempt Jobs it made (one driven before its directory went) deleted, so
        nothing holds GPUs for it."""
        if (cr.get("status") or {}).get("state") == "FAILED":
            return
        meta = cr["metadata"]
        cell = self.ctl.cells.get(meta["namespace"])
        for obj in cell.jobs.by(meta["name"]) if cell is not None else ():
            owners = obj["metadata"].get("ownerReferences") or []
            if any(o.get("uid") == meta.get("uid") for o in owners):
                self.ctl.children.delete_job(meta["namespace"], obj["metadata"]["name"])
        status = JobStatus(JobState.FAILED, 0, message, time.time())
        self._patch(meta["namespace"], meta["name"], status.to_dict())
        log.warning("TrainJob %s refused: %s", meta["name"], message)

    def _patch(self, ns: str, name: str, wire: dict[str, Any]) -> bool:
        """Patch the TrainJob's status to ``wire``; False if the TrainJob is gone."""
        self.ctl._guard()
        try:
            self.ctl.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, ns, PLURAL, name, {"status": wire}, _request_timeout=API_TIMEOUT
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            return False
        return True
