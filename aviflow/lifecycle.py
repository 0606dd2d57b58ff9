"""One lifecycle for every backend: observations in, events and actions out. Pure.

A driver (the local supervisor, the Kubernetes controller) tells the lifecycle
what it saw (:data:`Observation`: admission, nodes up, a node's exit, a hang, the attempt's
end, a cancel request, an eviction, the clock) and carries out what it is told
(:data:`Action`: start attempt N, stop attempt N). The lifecycle decides the rest, the same
way everywhere: synchronous training fails as a group (one node down stops the attempt),
a failed attempt restarts the whole group from the latest checkpoint while ``maxRestarts``
allows, evictions and preemptions requeue without counting as restarts, ``timeLimit``
bounds the time the job holds its GPUs (queueing does not count), and the first failing
rank is what a FAILED job reports.

It keeps no state besides the job's event log, so a driver that restarts rebuilds it
with :meth:`Lifecycle.from_events` and carries on (level-triggered).

>>> lc = Lifecycle(Policy(max_restarts=1)).submitted(0.0).lifecycle
>>> step = lc.observe(Admitted(1.0))
>>> [e.type.value for e in step.events], step.actions
(['STARTING'], [StartAttempt(attempt=1)])
>>> step = step.lifecycle.observe(NodeExited(2.0, attempt=1, node=0, code=1))
>>> step.actions
[StopAttempt(attempt=1, reason='node 0 exited with 1')]
>>> fail = FailureInfo(rank=1, node=0, exception="ValueError", message="boom")
>>> step = step.lifecycle.observe(AttemptEnded(3.0, attempt=1, codes={0: 1}, failure=fail))
>>> [e.type.value for e in step.events], step.actions
(['RESTARTING', 'STARTING'], [StartAttempt(attempt=2)])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

from aviflow._units import format_duration
from aviflow.attempts import held_seconds
from aviflow.estimate import Estimate, WaitNumbers
from aviflow.records import Event, EventType, FailureInfo, JobState, JobStatus


@dataclass(frozen=True)
class Policy:
    """What the spec asks of the lifecycle. ``readmit`` is True where every attempt is
    admitted anew (Kubernetes: a restarted attempt is a new workload in the queue), False
    where a restarting group keeps its admission (the local backend keeps its slots)."""

    max_restarts: int = 0
    time_limit: float | None = None
    readmit: bool = False

    @classmethod
    def from_spec(cls, spec: object, readmit: bool = False) -> Policy:
        """From a :class:`~aviflow.spec.TrainJobSpec`."""
        return cls(
            max_restarts=spec.max_restarts,  # type: ignore[attr-defined]
            time_limit=spec.time_limit_seconds,  # type: ignore[attr-defined]
            readmit=readmit,
        )


MAX_CANCEL_MESSAGE = 200


# -- observations ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Admitted:
    """The queue admitted the job's next attempt: its GPUs are allocated from now on.
    ``gpus``: what the admission reserved, where the queue says (recorded on ``STARTING``
    as ``data.gpus``, which the ledger prefers to the spec's count)."""

    time: float
    gpus: int | None = None


@dataclass(frozen=True)
class NodesUp:
    """Every node of ``attempt`` is running the training program. ``images``: the image
    digests its containers run (the kubelet's ``imageID``), recorded on ``RUNNING`` as
    ``data.imageIDs``."""

    time: float
    attempt: int
    images: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeExited:
    """One node of ``attempt`` exited (others may still run)."""

    time: float
    attempt: int
    node: int
    code: int


@dataclass(frozen=True)
class AttemptEnded:
    """Every node of ``attempt`` has stopped. ``codes``: exit code per node (None: it was
    stopped before it exited); ``failure``: the attributed failure when one failed."""

    time: float
    attempt: int
    codes: Mapping[int, int | None]
    failure: FailureInfo | None = None


@dataclass(frozen=True)
class CancelRequested:
    """``message`` (who asked) is recorded on the ``CANCELLED`` event, cut to
    ``MAX_CANCEL_MESSAGE`` characters: it can come from a kubectl user's annotation."""

    time: float
    message: str = "cancelled"


@dataclass(frozen=True)
class Hung:
    """The running ``attempt`` made no progress for ``spec.hangTimeout`` (see
    :mod:`aviflow.hang`): it is stopped as a failure, then restarted or failed."""

    time: float
    attempt: int
    reason: str


@dataclass(frozen=True)
class CannotStart:
    """A pod of the starting ``attempt`` cannot start until someone acts (a Secret named in
    ``spec.secrets`` that is not there, an image reference the node refuses): it is
    stopped as a failure with the kubelet's reason, then restarted or failed."""

    time: float
    attempt: int
    reason: str


@dataclass(frozen=True)
class Unrunnable:
    """A queued job's next attempt cannot be made as the cluster is configured now (the
    training runtime it names was removed from the settings): it fails at once, ``reason``
    its failure, and no attempt is created. Nothing a restart could change."""

    time: float
    reason: str


@dataclass(frozen=True)
class Evicted:
    """The running attempt lost its admission; ``preempted``: to another workload.
    ``time`` is when its GPUs were released; ``admitted_seconds``: how long the queue says
    the attempt held them (recorded on the ending event as ``data.admittedSeconds``)."""

    time: float
    attempt: int
    reason: str
    preempted: bool = False
    admitted_seconds: float | None = None


@dataclass(frozen=True)
class Lost:
    """The driver of the job is gone and nothing will end it otherwise (``cancelled``: it
    was being cancelled)."""

    time: float
    message: str
    cancelled: bool = False


@dataclass(frozen=True)
class Tick:
    """The clock (time limits)."""

    time: float


Observation = (
    Admitted
    | NodesUp
    | NodeExited
    | Hung
    | CannotStart
    | Unrunnable
    | AttemptEnded
    | CancelRequested
    | Evicted
    | Lost
    | Tick
)


# -- actions --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StartAttempt:
    """Create attempt ``attempt``'s nodes (from the latest checkpoint, if any)."""

    attempt: int


@dataclass(frozen=True)
class StopAttempt:
    """Stop every node of ``attempt``, then report :class:`AttemptEnded`."""

    attempt: int
    reason: str


Action = StartAttempt | StopAttempt


class _Why(Enum):
    FAILURE = "failure"
    CANNOT_START = "cannot start"  # a failure whose record is the reason: no rank ever ran
    CANCEL = "cancel"
    TIMEOUT = "timeout"


_FAILING = (_Why.FAILURE, _Why.CANNOT_START)  # a cancel still takes over from these


@dataclass(frozen=True)
class Step:
    """What one observation produced."""

    lifecycle: Lifecycle
    events: list[Event] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)


@dataclass(frozen=True)
class Lifecycle:
    """A job's lifecycle: its policy, its event log, and why its attempt is being stopped."""

    policy: Policy
    events: tuple[Event, ...] = ()
    stopping: tuple[_Why, str] | None = None

    @classmethod
    def from_events(cls, policy: Policy, events: Iterable[Event]) -> Lifecycle:
        return cls(policy, tuple(events))

    # -- derived -------------------------------------------------------------------------------
    @property
    def state(self) -> JobState:
        for ev in reversed(self.events):
            state = ev.type.state()
            if state is not None:
                return state
        return JobState.QUEUED

    @property
    def attempt(self) -> int:
        return max((ev.attempt for ev in self.events), default=0)

    @property
    def restarts(self) -> int:
        return sum(1 for ev in self.events if ev.type is EventType.RESTARTING)

    def status(
        self,
        queue_position: int | None = None,
        message: str | None = None,
        *,
        expected_start: Estimate | None = None,
        wait: WaitNumbers | None = None,
    ) -> JobStatus:
        """The status record these events stand for (the queue's view: while QUEUED)."""
        last = next((e for e in reversed(self.events) if e.type.state() is not None), None)
        failure = None
        if self.state is JobState.FAILED and last is not None:
            failure = last.failure
        queued = self.state is JobState.QUEUED
        return JobStatus(
            state=self.state,
            attempt=self.attempt,
            message=message if message is not None else (last.message if last else ""),
            updated=self.events[-1].time if self.events else None,
            queue_position=queue_position if queued else None,
            failure=failure,
            expected_start=expected_start if queued else None,
            wait=wait if queued else None,
        )

    # -- transitions ---------------------------------------------------------------------------
    def submitted(self, time: float, message: str = "waiting for admission") -> Step:
        """The job was accepted; with ``readmit`` its first attempt's workload is created now
        (the queue admits it), else the driver starts attempt 1 once admitted."""
        actions: list[Action] = [StartAttempt(1)] if self.policy.readmit else []
        return self._emit([Event(EventType.QUEUED, 0, message, time)], actions)

    def observe(self, obs: Observation) -> Step:
        if self.state.is_finished():
            return Step(self)
        match obs:
            case Admitted():
                return self._admitted(obs)
            case NodesUp() if obs.attempt == self.attempt and self.state is JobState.STARTING:
                data = {"imageIDs": list(obs.images)} if obs.images else {}
                running = Event(EventType.RUNNING, obs.attempt, "running", obs.time, data)
                return self._emit([running])
            case NodeExited() if obs.attempt == self.attempt and obs.code != 0:
                return self._stop(_Why.FAILURE, f"node {obs.node} exited with {obs.code}")
            case Hung() if obs.attempt == self.attempt and self.state.is_active():
                return self._stop(_Why.FAILURE, f"hung: {obs.reason}")
            case CannotStart() if obs.attempt == self.attempt and self.state.is_active():
                return self._stop(_Why.CANNOT_START, f"cannot start: {obs.reason}")
            case AttemptEnded() if obs.attempt == self.attempt and self.state.is_active():
                return self._ended(obs)
            case Unrunnable() if self.state is JobState.QUEUED:
                failed = {
                    "failure": FailureInfo(attempt=self.attempt, message=obs.reason).to_dict()
                }
                why = f"cannot start: {obs.reason}"
                return self._emit([Event(EventType.FAILED, self.attempt, why, obs.time, failed)])
            case CancelRequested():
                return self._cancel(obs)
            case Evicted() if obs.attempt == self.attempt and self.state.is_active():
                return self._evicted(obs)
            case Lost():
                kind = EventType.CANCELLED if obs.cancelled else EventType.FAILED
                return self._emit([Event(kind, self.attempt, obs.message, obs.time)])
            case Tick():
                return self._tick(obs)
        return Step(self)

    def _emit(self, events: list[Event], actions: list[Action] | None = None) -> Step:
        stopping = None if any(e.type.ends_attempt() for e in events) else self.stopping
        lc = replace(self, events=self.events + tuple(events), stopping=stopping)
        return Step(lc, events, list(actions or []))

    def _admitted(self, obs: Admitted) -> Step:
        if self.state is not JobState.QUEUED:
            return Step(self)
        attempt = self.attempt + 1
        message = "starting" if attempt == 1 else f"starting attempt {attempt}"
        data = {"gpus": obs.gpus} if obs.gpus else {}
        start = Event(EventType.STARTING, attempt, message, obs.time, data)
        if self.policy.readmit:
            return self._emit([start])  # the attempt's workload exists: admission starts it
        return self._emit([start], [StartAttempt(attempt)])

    def _stop(self, why: _Why, reason: str) -> Step:
        if self.stopping is not None:
            return Step(self)
        lc = replace(self, stopping=(why, reason))
        return Step(lc, [], [StopAttempt(self.attempt, reason)])

    def _cancel(self, obs: CancelRequested) -> Step:
        obs = replace(obs, message=obs.message[:MAX_CANCEL_MESSAGE] or "cancelled")
        if self.state.is_active():
            if self.stopping is not None and self.stopping[0] not in _FAILING:
                return Step(self)
            lc = replace(self, stopping=(_Why.CANCEL, obs.message))
            return Step(lc, [], [StopAttempt(self.attempt, obs.message)])
        # queued (also between attempts): nothing runs; with readmit the next attempt's
        # workload exists and waits in the queue
        actions: list[Action] = (
            [StopAttempt(self.attempt + 1, obs.message)] if self.policy.readmit else []
        )
        return self._emit(
            [Event(EventType.CANCELLED, self.attempt, obs.message, obs.time)], actions
        )

    def _tick(self, obs: Tick) -> Step:
        limit = self.policy.time_limit
        if limit is None or not self.state.is_active() or self.stopping is not None:
            return Step(self)
        if held_seconds(self.events, obs.time) <= limit:
            return Step(self)
        return self._stop(_Why.TIMEOUT, f"timeLimit {format_duration(limit)} exceeded")

    def _evicted(self, obs: Evicted) -> Step:
        kind = EventType.PREEMPTED if obs.preempted else EventType.EVICTED
        data = {} if obs.admitted_seconds is None else {"admittedSeconds": obs.admitted_seconds}
        ended = Event(kind, obs.attempt, obs.reason, obs.time, data)
        requeued = Event(EventType.QUEUED, obs.attempt, f"requeued: {obs.reason}", obs.time)
        actions: list[Action] = [StopAttempt(obs.attempt, obs.reason)]
        if self.policy.readmit:
            actions.append(StartAttempt(obs.attempt + 1))
        return self._emit([ended, requeued], actions)

    def _ended(self, obs: AttemptEnded) -> Step:
        why, reason = self.stopping or (None, "")
        n = obs.attempt
        if why is _Why.CANCEL:
            return self._emit([Event(EventType.CANCELLED, n, reason, obs.time)])
        if why is _Why.TIMEOUT:
            return self._emit([Event(EventType.FAILED, n, reason, obs.time)])
        if why is None and all(code == 0 for code in obs.codes.values()):
            return self._emit([Event(EventType.SUCCEEDED, n, "all ranks finished", obs.time)])
        failure = obs.failure or FailureInfo(message=reason or "the attempt failed")
        if why is _Why.CANNOT_START:  # no rank ran, so no record or log says more than this
            failure = FailureInfo(message=reason)
        if failure.attempt == 0:
            failure = replace(failure, attempt=n)
        data = {"failure": failure.to_dict()}
        what = f"{failure.where()} failed"
        if self.restarts >= self.policy.max_restarts:
            return self._emit([Event(EventType.FAILED, n, what, obs.time, data)])
        restart = Event(EventType.RESTARTING, n, what, obs.time, data)
        note = f"restart {self.restarts + 1} of {self.policy.max_restarts}"
        if self.policy.readmit:
            queued = Event(EventType.QUEUED, n, f"{note}: waiting for admission", obs.time)
            return self._emit([restart, queued], [StartAttempt(n + 1)])
        start = Event(EventType.STARTING, n + 1, note, obs.time)
        return self._emit([restart, start], [StartAttempt(n + 1)])
