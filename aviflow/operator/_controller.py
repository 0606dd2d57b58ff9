"""The TrainJob controller: informers, a work queue, and one reconcile per job.

Level-triggered: every change of a TrainJob, or of a Job, Pod or Kueue Workload labelled with
its id that changes what a reconcile reads of it (:class:`~._cell.ChildViews`), queues that
job; a reconcile rebuilds the job's :class:`~aviflow.lifecycle.Lifecycle`
from its events in the run store, compares it with what the cluster shows
(:mod:`._observe`), records the events that follow (the controller is their only writer)
and makes the cluster match: the headless Service and NetworkPolicy (created once per job
and process, :mod:`._children`) and the next attempt's Job while queued, the Job stopped
when the lifecycle says so, nothing left after a cancel. Every active job is also reconciled
every ``tick`` seconds (time limits, heartbeats), and the informers hand every cached object
back every ``resync`` seconds (from their caches). A job is never reconciled by two workers
at once; a new submission (a TrainJob with no status yet) is reconciled ahead of the jobs
queued before it (:mod:`._workqueue`), so in a burst the first reconciles, which create the
attempt Jobs, are not held up behind the earlier jobs' children's changes. A TrainJob whose
status is final costs nothing more: it is neither queued nor read again, neither ticked nor
handed back at a resync, and its cache keeps a few fields of it (:mod:`._cell`); its
attempts' Jobs go after their ``ttlSecondsAfterFinished``.

A queued job's position and Kueue's reason reach its status once it has been queued
``queued_tick`` seconds, and a new job's first TrainJob status patch waits ``first_status``
seconds (:mod:`._status`); the ticker reconciles queued jobs every ``queued_tick``, and the
others (a TrainJob with no status among them) every ``tick``.

Orphans, both ways: at start and every ``resync`` seconds, a run directory whose TrainJob was
never created is recorded FAILED after ``submission_grace`` seconds (:mod:`._orphans`); a
TrainJob with no directory is adopted only when kubectl made it (:mod:`._binding`).

With a ``fence`` (the leadership's :meth:`~aviflow.operator._leader.Leadership.holds`),
every write (an event, a status, a Kubernetes object) first checks that this controller
still leads; a deposed one writes nothing more (:class:`Deposed`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from aviflow import driving, usage
from aviflow.attempts import admission_drift, held_seconds
from aviflow.k8s import manifests as m
from aviflow.k8s.kueue import owner_job
from aviflow.k8s.settings import ClusterSettings
from aviflow.lifecycle import (
    Action,
    AttemptEnded,
    CancelRequested,
    CannotStart,
    Hung,
    Lifecycle,
    Lost,
    Observation,
    Policy,
    StartAttempt,
    StopAttempt,
    Tick,
    Unrunnable,
)
from aviflow.operator._binding import Binder
from aviflow.operator._cell import ACTIVE, Cell, ChildViews, final, job_label
from aviflow.operator._children import Children
from aviflow.operator._forecast import PoolForecast
from aviflow.operator._informer import Obj
from aviflow.operator._observe import (
    AttemptJob,
    PodView,
    Snapshot,
    WorkloadView,
    next_observation,
)
from aviflow.operator._orphans import SUBMISSION_GRACE, Submissions
from aviflow.operator._reads import API_TIMEOUT, ClusterReads
from aviflow.operator._status import FIRST_STATUS, Statuses
from aviflow.operator._workqueue import WorkQueue
from aviflow.records import CheckpointRef, Event, EventType, FailureInfo, JobState
from aviflow.spec import TrainJob
from aviflow.store import EventsCache, RunDir, RunStore, disk_full

log = logging.getLogger("aviflow.operator")
DEADLINE_GRACE = 60  # activeDeadlineSeconds backs up the controller's own time limit
NODE_LOG_LINES = 200
MAX_STEPS = 8
DRIFT_TOLERANCE = 2.0  # seconds: Kueue's count and its condition times are whole seconds


class Deposed(Exception):
    """This controller no longer holds the lease: it writes nothing more."""


def _key(namespace: str, name: str) -> str:
    """A TrainJob's key in the work queue."""
    return f"{namespace}/{name}"


class Controller:
    """Reconciles the TrainJobs of every jobs' namespace of ``settings`` (see the module
    docstring): one :class:`Cell` of informers each, one work queue."""

    def __init__(
        self,
        api: client.ApiClient,
        settings: ClusterSettings,
        store: RunStore,
        *,
        workers: int = 4,
        tick: float = 1.0,
        queued_tick: float = 5.0,
        first_status: float = FIRST_STATUS,
        resync: float = 30.0,
        fence: Callable[[], bool] | None = None,
        submission_grace: float = SUBMISSION_GRACE,
    ) -> None:
        self.api, self.settings, self.store = api, settings, store
        self.resync, self.submission_grace = resync, submission_grace
        self.fence = fence
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.net = client.NetworkingV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.queue = WorkQueue()
        self.tick, self.queued_tick, self.workers = tick, queued_tick, workers
        self.first_status = first_status
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._ticked: float | None = None  # when the ticker last went round (monotonic)
        self.cells = {
            ns: Cell(ns, settings.in_namespace(ns), self, resync)
            for ns in settings.job_namespaces()
        }
        self._informers = [i for cell in self.cells.values() for i in cell.informers]
        self._deleted: dict[str, Obj] = {}
        self._outages = driving.Outages(log.warning)  # no hang judgment on a full store
        self.reads = ClusterReads(api, self.custom, self.cells)
        self.statuses = Statuses(self)
        self.binder = Binder(store, self.statuses.refuse, self.settings, self.reads.team_of)
        self.submissions = Submissions(
            store,
            {ns: cell.trainjobs for ns, cell in self.cells.items()},
            self.reads.trainjob,
            self._guard,
            submission_grace,
        )
        self.events = EventsCache()  # the reconciles' and the forecast's: reads what grew
        self.forecast = PoolForecast(self)
        self._seen: dict[str, tuple[Any, ...]] = {}  # TrainJob key -> what a reconcile acts on
        self.views = ChildViews()  # a child's event queues its job only if its view changed
        self._full: dict[str, float] = {}  # TrainJob key -> since when the store refused it
        self.children = Children(self)

    # -- running ---------------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> None:
        for inf in self._informers:
            inf.start()
        deadline = time.monotonic() + timeout
        for inf in self._informers:
            if not inf.wait_synced(max(0.1, deadline - time.monotonic())):
                raise TimeoutError(f"the {inf.name} informer did not sync in {timeout:.0f}s")
        for i in range(self.workers):
            t = threading.Thread(target=self._work, name=f"reconcile-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        for name, loop in (("ticker", self._tick_loop), ("submissions", self._sweep_loop)):
            t = threading.Thread(target=loop, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        log.info("aviflow controller: watching TrainJobs in %s", ", ".join(self.cells))

    def health(self, stall_after: float) -> list[str]:
        """What keeps this controller from doing its work, in words; empty when it works (or
        has not started: a candidate waiting for the lease is healthy). A reconcile that
        has run for ``stall_after`` seconds, a ticker that has not gone round in that time,
        or a stopped worker or informer thread each count: a process in such a state still
        renews its lease, so only a liveness probe can restart it."""
        if not self._threads or self._stop.is_set():
            return []
        problems = [f"thread {t.name} has stopped" for t in self._threads if not t.is_alive()]
        problems += [f"informer {i.name} has stopped" for i in self._informers if not i.alive()]
        longest = self.queue.longest_busy()
        if longest is not None and longest[1] >= stall_after:
            problems.append(f"the reconcile of {longest[0]} has run for {longest[1]:.0f} s")
        if self._ticked is not None and time.monotonic() - self._ticked >= stall_after:
            since = time.monotonic() - self._ticked
            problems.append(f"the ticker has not gone round for {since:.0f} s")
        return problems

    def stop(self) -> None:
        self._stop.set()
        self.queue.close()
        for inf in self._informers:
            inf.stop()
        for t in self._threads:
            t.join(timeout=10)
        self.children.close()

    def _tick_loop(self) -> None:
        """Jobs that hold GPUs every ``tick`` (heartbeats, hangs, time limits); queued ones
        every ``queued_tick`` (their positions move as others are admitted)."""
        last_queued = self._ticked = time.monotonic()
        while not self._stop.wait(self.tick):
            self._ticked = time.monotonic()
            queued = time.monotonic() - last_queued >= self.queued_tick
            if queued:
                last_queued = time.monotonic()
            if queued:
                self.forecast.refresh()
            for obj in (o for c in self.cells.values() for o in c.trainjobs.by(ACTIVE)):
                state = (obj.get("status") or {}).get("state")  # never final: see _cell
                if queued or state != "QUEUED":  # None: its first status patch may wait
                    self.queue.put(_key(obj["metadata"]["namespace"], obj["metadata"]["name"]))

    def sweep_submissions(self) -> list[str]:
        """Fail the pending submissions whose TrainJob never came (:mod:`._orphans`); the
        ids failed."""
        return self.submissions.sweep(time.time())

    def _sweep_loop(self) -> None:
        """:meth:`sweep_submissions` now, then every ``resync`` seconds."""
        while True:
            try:
                self.sweep_submissions()
            except Deposed:
                log.warning("not settling submissions: this controller no longer leads")
            except Exception:  # tried again at the next resync
                log.exception("settling the pending submissions failed")
            if self._stop.wait(self.resync):
                return

    def _work(self) -> None:
        while True:
            key = self.queue.take()
            if key is None:
                return
            try:
                self.reconcile(key)
            except Deposed:
                log.warning("not reconciling %s: this controller no longer leads", key)
            except OSError as exc:
                if not disk_full(exc):
                    log.exception("reconcile of %s failed", key)
                elif key not in self._full:
                    self._full[key] = time.monotonic()
                    log.warning(
                        "the run store is full (%s): %s's events and status wait, in order, "
                        "and are tried again every tick until it takes bytes again",
                        exc.strerror or exc, key,
                    )  # fmt: skip
            except Exception:  # one job's trouble never stops the others; retried on tick
                log.exception("reconcile of %s failed", key)
            else:
                since = self._full.pop(key, None)
                if since is not None:
                    waited = time.monotonic() - since
                    log.warning(
                        "the run store takes bytes again: %s recorded after %.0f s", key, waited
                    )
            finally:
                self.queue.done(key)

    # -- informer callbacks ----------------------------------------------------------------------
    def _on_trainjob(self, obj: Obj) -> None:
        """Queue the job unless only its status changed (our own patch coming back); one
        never reconciled (no status: a new submission) goes ahead of the others, since its
        first reconcile creates its attempt Job (:class:`WorkQueue`'s urgent lane)."""
        meta = obj["metadata"]
        key = _key(meta["namespace"], meta["name"])
        if obj.get("deleted"):
            self._seen.pop(key, None)
            self.children.forget(meta["namespace"], meta["name"])
            self.statuses.forget(meta.get("uid", ""))
            if not final(obj):  # a final one had its end recorded
                self._deleted[key] = obj
                self.queue.put(key)
            return
        cancel = (meta.get("annotations") or {}).get(m.ANNOTATION_CANCEL)
        seen = (meta.get("uid"), meta.get("generation"), cancel, meta.get("deletionTimestamp"))
        if self._seen.get(key) != seen:
            self._seen[key] = seen
            if not final(obj):
                new = not (obj.get("status") or {}).get("state")
                self.queue.put(key, urgent=new)

    def _on_child(self, obj: Obj, view: Callable[[Obj], Any] | None = None) -> None:
        """Queue the job of a Job or pod (its label) unless the event left what a reconcile
        reads of it (``view``) as it was (:class:`ChildViews`)."""
        if view is not None and not self.views.changed(obj, view):
            return
        for job_id in job_label(obj):
            self.queue.put(_key(obj["metadata"]["namespace"], job_id))

    def _on_workload(self, obj: Obj) -> None:
        name = owner_job(obj)
        if name and "-a" in name and self.views.changed(obj, self._workload_view):
            self.queue.put(_key(obj["metadata"]["namespace"], name.rsplit("-a", 1)[0]))
        # others' queue positions move too: the ticker reconciles queued jobs every queued_tick

    def _workload_view(self, obj: Obj) -> WorkloadView:
        return WorkloadView.of(obj, 0, self.settings.gpu_resource)  # attempt: its Job's

    def _guard(self) -> None:
        """Raises :class:`Deposed` unless this controller may write now."""
        if self.fence is not None and not self.fence():
            raise Deposed("this controller no longer holds the lease")

    # -- one job ---------------------------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        """Reconcile one TrainJob (its key: ``namespace/name``)."""
        self._guard()
        ns, _, job_id = key.partition("/")
        cell = self.cells[ns]
        cr = cell.trainjobs.get(cell.ns, job_id)
        if cr is None:
            gone = self._deleted.pop(key, None)
            if gone is not None:
                self._record_deleted(gone)
            return
        if final(cr):
            self.children.forget(ns, job_id)
            return  # ended, and recorded: a child's change or a resync costs this lookup only
        run = self.binder.run_dir(cr)
        if run is None:
            return
        job = run.spec()
        policy = Policy.from_spec(job.spec, readmit=True)
        lc = Lifecycle.from_events(policy, self.events.of(run))
        ref = m.JobRef(job_id, cr["metadata"]["uid"], run.path.parent.name, run.meta().team)
        now = time.time()
        events: list[Event] = []
        actions: list[Action] = []

        def feed(obs: Observation | None) -> None:
            nonlocal lc
            if obs is None:
                return
            step = lc.observe(obs)
            lc = step.lifecycle
            events.extend(step.events)
            actions.extend(step.actions)

        if not lc.events:
            step = lc.submitted(now)
            lc, events, actions = step.lifecycle, list(step.events), list(step.actions)
        cancel = (cr["metadata"].get("annotations") or {}).get(m.ANNOTATION_CANCEL)
        if cancel is not None:
            feed(CancelRequested(now, cancel or "cancelled"))
        feed(Tick(now))
        snap = self._snapshot(cell, job_id, job, run)
        if lc.state is JobState.RUNNING:
            running = next(e.time for e in reversed(lc.events) if e.type is EventType.RUNNING)
            spec = job.spec
            hung = driving.watch_hang(
                run, lc.attempt, spec.hang_timeout_seconds, running, spec.total_gpus,
                spec.gpus_per_node, now, self._outages,
            )  # fmt: skip
            if hung is not None:
                feed(Hung(now, lc.attempt, hung.message))
            else:  # use and the idle rule (aviflow.usage), as the local supervisor
                use = usage.watch(run, lc.events, lc.attempt, running, spec.total_gpus,
                                  cell.settings.usage, now)  # fmt: skip
                lc = replace(lc, events=lc.events + use.events)
                events.extend(use.events)
                feed(CancelRequested(now, use.cancel) if use.cancel is not None else None)
        for _ in range(MAX_STEPS):
            obs = next_observation(lc, snap, now)
            if isinstance(obs, CannotStart) and run.hang(obs.attempt) is None:
                # declared, as a hang is: when the pods are gone, it is the attempt's failure
                why = FailureInfo(attempt=obs.attempt, message=f"cannot start: {obs.reason}")
                self._guard()
                run.write_hang(why)
            if isinstance(obs, AttemptEnded) and not all(c == 0 for c in obs.codes.values()):
                failure = self._failure(cell, run, job, obs)
                obs = AttemptEnded(obs.time, obs.attempt, obs.codes, failure)
            before = len(lc.events), lc.stopping
            feed(obs)
            if obs is None or (len(lc.events), lc.stopping) == before:
                break
        if lc.state is JobState.QUEUED and lc.attempt + 1 not in snap.jobs:  # one to make
            missing = cell.settings.missing_runtime(job.spec.runtime)  # removed since submitted
            feed(Unrunnable(now, f"its training runtime is gone: {missing}") if missing else None)
        if events:
            self._guard()
            run.append_events(events)  # all or none: a full store keeps none of them
            self._cross_check(job_id, lc.events, events)
        made = {self._carry_out(cell, action, job, ref, lc, run, snap) for action in actions}
        if lc.state is JobState.QUEUED and lc.attempt + 1 not in made:
            self._ensure_attempt(cell, job, ref, lc, run)  # level: the next attempt's Job exists
        elif lc.state.is_active() and not lc.stopping:  # a pair refused when the Job was made
            self.children.ensure(cell, ref, job)
        if lc.state.is_finished() and lc.state is JobState.CANCELLED:
            self.children.delete(cell, job_id)
        self.statuses.write(cr, run, lc, snap, job_id, now)
        if lc.state.is_finished():
            self.children.forget(ns, job_id)

    @staticmethod
    def _cross_check(job_id: str, history: tuple[Event, ...], new: list[Event]) -> None:
        """Warn where an attempt's admitted time in the events (hence the ledger) and
        Kueue's ``accumulatedPastExecutionTimeSeconds`` disagree."""
        for ev in new:
            drift = admission_drift(history, ev)
            if drift is not None and abs(drift) > DRIFT_TOLERANCE:
                log.warning(
                    "%s attempt %d: the events give %.0f s admitted, Kueue %s s (off by %+.0f s)",
                    job_id, ev.attempt, drift + ev.data["admittedSeconds"],
                    ev.data["admittedSeconds"], drift,
                )  # fmt: skip

    # -- reads -----------------------------------------------------------------------------------
    def _snapshot(self, cell: Cell, job_id: str, job: TrainJob, run: RunDir) -> Snapshot:
        jobs: dict[int, AttemptJob] = {}
        names: dict[str, int] = {}
        for obj in cell.jobs.by(job_id):
            view = AttemptJob.of(obj)
            jobs[view.attempt] = view
            names[obj["metadata"]["name"]] = view.attempt
        pods = tuple(PodView.of(p) for p in cell.pods.by(job_id))
        workloads: dict[int, WorkloadView] = {}
        for name, attempt in names.items():
            for wl in cell.workloads.by(name):
                workloads[attempt] = WorkloadView.of(wl, attempt, self.settings.gpu_resource)
        beats = {}
        for node in range(job.spec.nodes) if jobs else ():  # no Job: no pod beats for it
            beat = run.heartbeat(node).get("attempt")
            if isinstance(beat, int):
                beats[node] = beat
        return Snapshot(job.spec.nodes, jobs, pods, workloads, beats)

    def _failure(self, cell: Cell, run: RunDir, job: TrainJob, obs: AttemptEnded) -> FailureInfo:
        # a rank's tail is its pod's log through the API server, never a file the job wrote
        # (which it could have made a symlink to a secret of ours)
        logs: dict[int, str] = {}
        per_node = job.spec.gpus_per_node
        return driving.attempt_failure(
            run, obs.attempt, obs.codes, job.spec.total_gpus, per_node,
            lambda n: logs.setdefault(n, self._pod_log(cell, run.id, obs.attempt, n)),
            lambda rank: logs.get(rank // per_node, ""),
        )  # fmt: skip

    def _pod_log(self, cell: Cell, job_id: str, attempt: int, index: int) -> str:
        for pod in cell.pods.by(job_id):
            view = PodView.of(pod)
            if (view.attempt, view.index) == (attempt, index):
                try:
                    text = self.core.read_namespaced_pod_log(
                        pod["metadata"]["name"],
                        cell.ns,
                        tail_lines=NODE_LOG_LINES,
                        _request_timeout=API_TIMEOUT,
                    )
                    return str(text)
                except ApiException:
                    return ""
        return ""

    # -- writes ----------------------------------------------------------------------------------
    def _carry_out(
        self,
        cell: Cell,
        action: Action,
        job: TrainJob,
        ref: m.JobRef,
        lc: Lifecycle,
        run: RunDir,
        snap: Snapshot,
    ) -> int | None:
        """Carry ``action`` out; the attempt whose Job it made sure of, if it did."""
        if isinstance(action, StartAttempt):
            if not lc.state.is_finished():
                return self._ensure_attempt(cell, job, ref, lc, run)
        elif isinstance(action, StopAttempt):
            view = snap.jobs.get(action.attempt)
            failing = any(p.exit_code not in (None, 0) for p in snap.pods_of(action.attempt))
            if view is not None and not view.finished and not failing:
                # a failing pod makes the Job controller stop the rest (podFailurePolicy)
                self.children.delete_job(cell.ns, m.attempt_name(ref.id, action.attempt))
        return None

    def _ensure_attempt(
        self, cell: Cell, job: TrainJob, ref: m.JobRef, lc: Lifecycle, run: RunDir
    ) -> int:
        """The next attempt's Job exists, and the job's Service and NetworkPolicy (made with
        it: :mod:`._children`); its number."""
        attempt, settings = lc.attempt + 1, cell.settings
        if cell.jobs.get(cell.ns, m.attempt_name(ref.id, attempt)) is not None:
            self.children.ensure(cell, ref, job)  # a pair refused when the Job was made
            return attempt
        deadline = None
        if job.spec.time_limit_seconds is not None:
            left = job.spec.time_limit_seconds - held_seconds(lc.events, time.time())
            deadline = int(max(1, left)) + DEADLINE_GRACE
        body = m.attempt_job(
            job,
            ref,
            attempt,
            settings,
            deadline_seconds=deadline,
            resume_subpath=self._resume_subpath(job, run),
        )
        self.children.ensure(cell, ref, job, body)
        return attempt

    def _resume_subpath(self, job: TrainJob, run: RunDir) -> str | None:
        start = job.spec.resume_from
        if start is None:
            return None
        path = self.store.checkpoint_path(CheckpointRef(start.job, start.step))
        return path.relative_to(self.store.root).as_posix()

    def _record_deleted(self, cr: Obj) -> None:
        """The TrainJob was deleted (its children go with it): record the end if it had none."""
        path = self.store.locate(cr["metadata"]["name"])
        if path is None:
            return
        run = RunDir(path)
        if not self.binder.bound_here(run, cr):
            return
        lc = Lifecycle.from_events(
            Policy.from_spec(run.spec().spec, readmit=True), self.events.of(run)
        )
        step = lc.observe(Lost(time.time(), "the TrainJob was deleted", cancelled=True))
        if step.events:
            self._guard()
            run.record(step.events, step.lifecycle.status())
