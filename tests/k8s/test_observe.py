"""The controller's pure reading of Kueue Workloads into lifecycle observations: admission
segments from the Workload's Admitted/Evicted/Finished transitions, GPUs from the admission's
resource usage, and the cross-check against Kueue's accumulatedPastExecutionTimeSeconds."""

from __future__ import annotations

from typing import Any

from aviflow.attempts import JobInfo, admission_drift, attempts_from_events
from aviflow.k8s.manifests import LABEL_ATTEMPT
from aviflow.lifecycle import Admitted, AttemptEnded, CannotStart, Evicted, Lifecycle, Policy
from aviflow.operator._observe import (
    CONFIG_GRACE,
    INDEX_LABEL,
    RELEASE_WAIT,
    AttemptJob,
    PodView,
    Snapshot,
    WorkloadView,
    next_observation,
)
from aviflow.records import EventType, FailureInfo

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def iso(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def workload(*conditions: tuple[str, str, float, str], **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "job-a1-wl"},
        "spec": {"queueName": "team-a"},
        "status": {
            "conditions": [
                {"type": k, "status": s, "lastTransitionTime": iso(t), "reason": r, "message": r}
                for k, s, t, r in conditions
            ],
            "admission": {
                "podSetAssignments": [
                    {"name": "main", "count": 2, "resourceUsage": {"nvidia.com/gpu": "16"}}
                ]
            },
            **status,
        },
    }


def evicted(reason: str, *now: tuple[str, str, float, str], **status: Any) -> WorkloadView:
    """Attempt 1's Workload, evicted at T0 + 50 for ``reason``; ``now``: its Admitted
    condition (default: still admitted since T0 + 10)."""
    admitted = now or (("Admitted", "True", T0 + 10, "Admitted"),)
    return WorkloadView.of(workload(*admitted, ("Evicted", "True", T0 + 50, reason), **status), 1)


def attempt_1(wl: WorkloadView, finished: str | None = None) -> Snapshot:
    """What the controller sees of a 2-node job whose attempt 1 has ``wl``."""
    return Snapshot(nodes=2, jobs={1: AttemptJob(1, finished)}, workloads={1: wl})


def running(attempt_started: float) -> Lifecycle:
    lc = Lifecycle(Policy(readmit=True)).submitted(T0).lifecycle
    return lc.observe(Admitted(attempt_started, gpus=16)).lifecycle


def test_admission_reads_the_gpus_kueue_reserved_and_its_transition_time() -> None:
    wl = WorkloadView.of(workload(("Admitted", "True", T0 + 7, "Admitted")), 1)
    assert (wl.admitted_at, wl.gpus, wl.queue) == (T0 + 7, 16, "team-a")
    lc = Lifecycle(Policy(readmit=True)).submitted(T0).lifecycle
    obs = next_observation(lc, Snapshot(nodes=2, workloads={1: wl}), now=T0 + 9)
    assert obs == Admitted(T0 + 7, 16)
    start = lc.observe(obs).events[0]
    assert (start.type, start.time, start.data) == (EventType.STARTING, T0 + 7, {"gpus": 16})


def test_an_eviction_ends_the_segment_when_kueue_releases_the_quota() -> None:
    lc = running(T0 + 10)
    held = evicted("Preempted")
    assert next_observation(lc, attempt_1(held), now=T0 + 51) is None  # pods still stopping
    released = evicted(
        "Preempted",
        ("Admitted", "False", T0 + 58, "NoReservation"),
        accumulatedPastExecutionTimeSeconds=48,
    )
    assert (released.released_at, released.admitted_seconds) == (T0 + 58, 48)
    obs = next_observation(lc, attempt_1(released), now=T0 + 59)
    assert isinstance(obs, Evicted)
    assert (obs.time, obs.preempted, obs.admitted_seconds) == (T0 + 58, True, 48)
    step = lc.observe(obs)
    ended = step.events[0]
    assert (ended.type, ended.data) == (EventType.PREEMPTED, {"admittedSeconds": 48})
    events = step.lifecycle.events
    assert admission_drift(events, ended) == 0.0
    info = JobInfo("j", "u", "a", "team-a", nodes=2, gpus=4, submitted=T0)
    [row] = attempts_from_events(info, events)
    assert (row.gpus, row.admitted, row.finished, row.gpu_seconds(now=0)) == (
        16, T0 + 10, T0 + 58, 16 * 48.0,
    )  # fmt: skip


def test_an_eviction_kueue_never_releases_is_recorded_after_the_wait() -> None:
    lc = running(T0 + 10)
    held = evicted("PodsReadyTimeout")
    obs = next_observation(lc, attempt_1(held), now=T0 + 50 + RELEASE_WAIT)
    assert obs == Evicted(T0 + 50 + RELEASE_WAIT, 1, "PodsReadyTimeout: PodsReadyTimeout")
    assert admission_drift(lc.events, lc.observe(obs).events[0]) is None


def test_a_finished_attempt_ends_at_the_workloads_finished_transition() -> None:
    lc = running(T0 + 10)
    done = WorkloadView.of(
        workload(
            ("Admitted", "True", T0 + 10, "Admitted"),
            ("Finished", "True", T0 + 30, "Succeeded"),
        ),
        1,
    )
    assert done.finished_at == T0 + 30
    snap = attempt_1(done, "Complete")
    assert next_observation(lc, snap, now=T0 + 33) == AttemptEnded(T0 + 30, 1, {0: 0, 1: 0})


def test_a_job_that_completed_as_kueue_evicted_it_succeeded_at_once() -> None:
    """Kueue's fair sharing preempted the Workload as its last pod exited 0: the Job is
    Complete, Kueue marks the Workload Finished and never takes the admission back. The
    attempt ended as it ran (replayed through Kueue, such a job waited the release wait,
    then was preempted, readmitted and failed its time limit)."""
    lc = running(T0 + 10)
    held = evicted("Preempted")
    assert next_observation(lc, attempt_1(held, "Complete"), now=T0 + 51) == AttemptEnded(
        T0 + 51, 1, {0: 0, 1: 0}
    )
    done = evicted(
        "Preempted",
        ("Admitted", "True", T0 + 10, "Admitted"),
        ("Finished", "True", T0 + 49, "Succeeded"),
    )
    obs = next_observation(lc, attempt_1(done, "Complete"), now=T0 + 51)
    assert obs == AttemptEnded(T0 + 49, 1, {0: 0, 1: 0})
    assert [e.type for e in lc.observe(obs).events] == [EventType.SUCCEEDED]
    # a Job failed by its disruption rule is still the eviction it was
    disrupted = AttemptJob(1, "Failed", "PodFailurePolicy", "rule at index 0 matched")
    snap = Snapshot(nodes=2, jobs={1: disrupted}, workloads={1: held})
    assert next_observation(lc, snap, now=T0 + 51) is None  # waits for Kueue's release


def test_drift_names_a_segment_that_disagrees_with_kueue() -> None:
    lc = running(T0 + 10)
    obs = Evicted(T0 + 40, 1, "Preempted", preempted=True, admitted_seconds=20)
    step = lc.observe(obs)
    assert admission_drift(step.lifecycle.events, step.events[0]) == 10.0


def test_a_pod_that_cannot_start_until_someone_acts_fails_the_attempt_after_the_grace() -> None:
    """A Secret of ``spec.secrets`` that is not there: the kubelet retries for ever, the job
    would hold its GPUs; the controller stops the attempt with the kubelet's words."""
    lc = running(T0 + 10)  # STARTING since T0 + 10
    stuck = {
        "metadata": {"labels": {LABEL_ATTEMPT: "1"}, "annotations": {INDEX_LABEL: "1"}},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "state": {
                        "waiting": {
                            "reason": "CreateContainerConfigError",
                            "message": 'secret "hf-token" not found',
                        }
                    }
                }
            ],
        },
    }
    pod = PodView.of(stuck)
    assert pod.stuck == 'CreateContainerConfigError: secret "hf-token" not found'
    wl = WorkloadView.of(workload(("Admitted", "True", T0 + 10, "Admitted")), 1)
    snap = Snapshot(nodes=2, jobs={1: AttemptJob(1, None)}, pods=(pod,), workloads={1: wl})
    assert next_observation(lc, snap, now=T0 + 10 + CONFIG_GRACE - 1) is None
    obs = next_observation(lc, snap, now=T0 + 10 + CONFIG_GRACE)
    assert obs == CannotStart(
        T0 + 10 + CONFIG_GRACE,
        1,
        'node 1: CreateContainerConfigError: secret "hf-token" not found',
    )
    step = lc.observe(obs)
    reason = 'cannot start: node 1: CreateContainerConfigError: secret "hf-token" not found'
    assert [a.reason for a in step.actions] == [reason]
    # the pods go; no rank ran, so the reason is the failure's record, whatever else is found
    generic = FailureInfo(message="the attempt failed without a failure record or exit code")
    end = step.lifecycle.observe(AttemptEnded(T0 + 40, 1, {0: None, 1: None}, generic))
    [failed] = end.events
    assert failed.type is EventType.FAILED
    assert failed.data["failure"]["message"] == reason
    # an image still being pulled is not a person's to mend: no observation
    pulling = {
        **stuck,
        "status": {"containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}]},
    }
    assert PodView.of(pulling).stuck is None
