"""Pure: what the cluster shows about one TrainJob -> the next lifecycle observation.

The controller reads a :class:`Snapshot` from its caches (the job's attempt Jobs, their pods
and Kueue Workloads, the nodes' heartbeats from the run store) and feeds
:func:`next_observation` to the shared :class:`~aviflow.lifecycle.Lifecycle` until it has
nothing new to say. Nothing here remembers anything between reconciles: the lifecycle is
rebuilt from the job's events each time, so a restarted controller carries on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aviflow.k8s.manifests import LABEL_ATTEMPT, RULE_DISRUPTION
from aviflow.lifecycle import (
    Admitted,
    AttemptEnded,
    CannotStart,
    Evicted,
    Lifecycle,
    NodeExited,
    NodesUp,
    Observation,
)
from aviflow.records import JobState

Obj = dict[str, Any]
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
TERMINAL = ("Succeeded", "Failed")
# An evicted attempt ends when Kueue releases its quota (its pods are gone by then); if that
# does not come within this long, the controller records the eviction anyway.
RELEASE_WAIT = 300.0
# Why a container waits that only a person can mend (the kubelet retries them forever): a
# Secret or ConfigMap it names is not there, an image reference it cannot use. A starting
# attempt whose pod waits so for this long is stopped as a failure with the kubelet's words
# (a Secret made right after the submit still counts).
CONFIG_ERRORS = ("CreateContainerConfigError", "InvalidImageName", "ErrImageNeverPull")
CONFIG_GRACE = 20.0


def timestamp(text: str | None) -> float | None:
    """An RFC 3339 time from the API server as epoch seconds."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def condition(obj: Obj, kind: str) -> Obj | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c  # type: ignore[no-any-return]
    return None


def is_true(obj: Obj, kind: str) -> bool:
    c = condition(obj, kind)
    return c is not None and c.get("status") == "True"


@dataclass(frozen=True)
class AttemptJob:
    """An attempt's Indexed Job: ``finished`` is ``Complete``/``Failed``/None."""

    attempt: int
    finished: str | None = None
    reason: str = ""
    message: str = ""
    deleting: bool = False

    @classmethod
    def of(cls, obj: Obj) -> AttemptJob:
        attempt = int(obj["metadata"]["labels"][LABEL_ATTEMPT])
        deleting = bool(obj["metadata"].get("deletionTimestamp")) or bool(obj.get("deleted"))
        for kind in ("Complete", "Failed"):
            c = condition(obj, kind)
            if c is not None and c.get("status") == "True":
                return cls(attempt, kind, c.get("reason", ""), c.get("message", ""), deleting)
        return cls(attempt, deleting=deleting)

    @property
    def disrupted(self) -> bool:
        """Failed by the podFailurePolicy's disruption rule (preemption, drain, node loss)."""
        return (
            self.finished == "Failed"
            and self.reason == "PodFailurePolicy"
            and f"rule at index {RULE_DISRUPTION}" in self.message
        )


@dataclass(frozen=True)
class PodView:
    attempt: int
    index: int
    phase: str
    exit_code: int | None = None
    image_id: str = ""
    stuck: str | None = None  # a container's CONFIG_ERRORS reason and message

    @classmethod
    def of(cls, obj: Obj) -> PodView:
        meta, status = obj["metadata"], obj.get("status") or {}
        annotations = meta.get("annotations") or {}
        labels = meta.get("labels") or {}
        index = annotations.get(INDEX_LABEL, labels.get(INDEX_LABEL, "0"))
        code, image_id, stuck = None, "", None
        for c in status.get("containerStatuses") or []:
            image_id = image_id or c.get("imageID") or ""
            term = (c.get("state") or {}).get("terminated")
            if term is not None:
                code = int(term.get("exitCode", 0))
            wait = (c.get("state") or {}).get("waiting") or {}
            if wait.get("reason") in CONFIG_ERRORS:
                stuck = f"{wait['reason']}: {str(wait.get('message', ''))[:500]}"
        phase = status.get("phase", "Pending")
        if obj.get("deleted"):
            phase = phase if phase in TERMINAL else "Gone"
        attempt = int(labels.get(LABEL_ATTEMPT, "0"))
        return cls(attempt, int(index), phase, code, image_id, stuck)

    @property
    def active(self) -> bool:
        return self.phase not in (*TERMINAL, "Gone")


@dataclass(frozen=True)
class WorkloadView:
    """An attempt's Kueue Workload: its ``Admitted``/``Evicted``/``Finished`` transitions,
    the GPUs its admission reserved, and why it waits (the ``QuotaReserved=False`` message).

    ``released_at`` is when Kueue took the admission back (``Admitted`` turned False after
    an eviction, once the pods were gone) and ``admitted_seconds`` Kueue's own count of the
    time it was admitted (``status.accumulatedPastExecutionTimeSeconds``, set at release).
    """

    attempt: int
    admitted_at: float | None = None
    evicted: tuple[float, str, str] | None = None
    pending: str = ""
    finished: bool = False
    gpus: int = 0
    name: str = ""
    queue: str = ""
    finished_at: float | None = None
    released_at: float | None = None
    admitted_seconds: int | None = None

    @classmethod
    def of(cls, obj: Obj, attempt: int, gpu_resource: str = "nvidia.com/gpu") -> WorkloadView:
        status = obj.get("status") or {}
        admitted = condition(obj, "Admitted")
        evicted = condition(obj, "Evicted")
        reserved = condition(obj, "QuotaReserved")
        finished = condition(obj, "Finished")
        admitted_at = released_at = None
        past = status.get("accumulatedPastExecutionTimeSeconds")
        if admitted is not None and admitted.get("status") == "True":
            admitted_at = timestamp(admitted.get("lastTransitionTime"))
        elif admitted is not None and past is not None:
            released_at = timestamp(admitted.get("lastTransitionTime"))
        ev = None
        if evicted is not None and evicted.get("status") == "True":
            ev = (
                timestamp(evicted.get("lastTransitionTime")) or 0.0,
                evicted.get("reason", ""),
                evicted.get("message", ""),
            )
        pending = ""
        if reserved is not None and reserved.get("status") == "False":
            pending = reserved.get("message", "")
        gpus = 0
        for ps in (status.get("admission") or {}).get("podSetAssignments") or []:
            gpus += int(str((ps.get("resourceUsage") or {}).get(gpu_resource, "0")))
        done = finished is not None and finished.get("status") == "True"
        return cls(
            attempt,
            admitted_at,
            ev,
            pending,
            done,
            gpus,
            obj["metadata"]["name"],
            (obj.get("spec") or {}).get("queueName", ""),
            timestamp(finished.get("lastTransitionTime")) if done and finished else None,
            released_at,
            int(past) if past is not None else None,
        )


@dataclass(frozen=True)
class Snapshot:
    """What the controller sees of one job now."""

    nodes: int
    jobs: dict[int, AttemptJob] = field(default_factory=dict)
    pods: tuple[PodView, ...] = ()
    workloads: dict[int, WorkloadView] = field(default_factory=dict)
    heartbeats: dict[int, int] = field(default_factory=dict)  # node -> attempt it beat for

    def pods_of(self, attempt: int) -> list[PodView]:
        return [p for p in self.pods if p.attempt == attempt]

    def codes(self, attempt: int) -> dict[int, int | None]:
        job = self.jobs.get(attempt)
        if job is not None and job.finished == "Complete":
            return dict.fromkeys(range(self.nodes), 0)
        codes: dict[int, int | None] = dict.fromkeys(range(self.nodes))
        for p in self.pods_of(attempt):
            if p.exit_code is not None:
                codes[p.index] = p.exit_code
        return codes


def next_observation(lc: Lifecycle, snap: Snapshot, now: float) -> Observation | None:
    """The one thing the lifecycle has not been told yet, or None."""
    state, n = lc.state, lc.attempt
    if state.is_finished():
        return None
    last = lc.events[-1].time if lc.events else 0.0
    if state is JobState.QUEUED:
        wl = snap.workloads.get(n + 1)
        if wl is not None and wl.admitted_at is not None and wl.evicted is None:
            return Admitted(wl.admitted_at, wl.gpus or None)
        return None
    wl, job = snap.workloads.get(n), snap.jobs.get(n)
    # a Job that ran to its end is the attempt's end, even where Kueue evicted its Workload
    # meanwhile (a preemption decided as the last pod exited): no quota is released then
    ran_out = job is not None and job.finished is not None and not job.disrupted
    if wl is not None and wl.evicted is not None and not ran_out:
        when, reason, message = wl.evicted
        if wl.admitted_at is not None and now - when < RELEASE_WAIT:
            return None  # Kueue stops the pods, then releases the quota: the segment's end
        return Evicted(
            max(wl.released_at or now, last),
            n,
            f"{reason}: {message}",
            preempted=reason == "Preempted",
            admitted_seconds=wl.admitted_seconds,
        )
    if job is not None and job.disrupted:
        return Evicted(now, n, f"disrupted: {job.message}")
    pods = snap.pods_of(n)
    if (job is None or job.finished or job.deleting) and not any(p.active for p in pods):
        ended = wl.finished_at if wl is not None and wl.finished_at is not None else now
        ended = max(ended, last)  # Kueue's times are whole seconds; events stay in order
        return AttemptEnded(ended, n, snap.codes(n))
    failed = sorted((p.index, p.exit_code) for p in pods if p.exit_code not in (None, 0))
    if failed:
        index, code = failed[0]
        assert code is not None
        return NodeExited(now, n, index, code)
    stuck = sorted((p.index, p.stuck) for p in pods if p.stuck is not None)
    if state is JobState.STARTING and stuck and now - last >= CONFIG_GRACE:
        index, why = stuck[0]
        return CannotStart(now, n, f"node {index}: {why}")
    if state is JobState.STARTING and all(snap.heartbeats.get(i) == n for i in range(snap.nodes)):
        return NodesUp(now, n, tuple(sorted({p.image_id for p in pods if p.image_id})))
    return None


def queue_positions(workloads: list[Obj]) -> dict[tuple[str, str], int]:
    """1-based position of every pending Workload within its LocalQueue (namespace, queue):
    Kueue's order, priority first then creation time. Workloads that hold quota or have
    finished are not pending."""
    pending: dict[tuple[str, str], list[tuple[int, str, str]]] = {}
    for wl in workloads:
        if is_true(wl, "QuotaReserved") or is_true(wl, "Finished") or wl.get("deleted"):
            continue
        spec, meta = wl.get("spec") or {}, wl["metadata"]
        if spec.get("active") is False:
            continue
        q = (meta.get("namespace", ""), spec.get("queueName", ""))
        pending.setdefault(q, []).append(
            (-int(spec.get("priority") or 0), meta.get("creationTimestamp", ""), meta["name"])
        )
    out: dict[tuple[str, str], int] = {}
    for (ns, _), items in pending.items():
        for i, (_, _, name) in enumerate(sorted(items)):
            out[(ns, name)] = i + 1
    return out
