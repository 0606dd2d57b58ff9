"""Submissions that never completed: run directories whose TrainJob was never created.

aviflow-api writes a job's directory (owner, spec, submission token) before it creates the
TrainJob, and the run store marks the job pending until the controller binds it
(:meth:`~aviflow.store.RunStore.pending`). When aviflow-api dies in between, or loses the
API server and gives up, the directory would stay QUEUED for ever, in every listing and in
its queue's count. :class:`Submissions` reads the pending marks alone (not every job), and
records one older than the grace period whose TrainJob the API server does not have (asked
directly: the cache may be behind), or has under another token (someone else's TrainJob took
the name, so this one can never be made), as FAILED, "the submission did not complete". A
TrainJob of its own that appears after all is bound to the directory as usual and shows that
end.

The grace period must be well past what a submission may take (two creates, each at most
aviflow-api's ``apiTimeout``): ten minutes by default.

Directories written before the marks existed (an upgrade from 0.1) are marked once, by the
first sweep of a store (:meth:`Submissions.mark_earlier`: every job read once, then a file
``.pending-marked`` says it was done), so the ones stranded then are found like any other.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping

from aviflow.k8s import manifests as m
from aviflow.lifecycle import Lifecycle, Lost, Policy
from aviflow.operator._binding import BINDING
from aviflow.operator._informer import Informer, Obj
from aviflow.store import RunDir, RunStore, read_json

log = logging.getLogger("aviflow.operator")
SUBMISSION_GRACE = 600.0
MARKED_EARLIER = ".pending-marked"  # in the store's root: earlier directories were marked


class Submissions:
    """The pending submissions of one controller's namespaces.

    ``trainjobs``: each namespace's TrainJob informer; ``fetch(namespace, name)``: the
    TrainJob as the API server has it, or None; ``guard()``: raises unless this controller may
    write."""

    def __init__(
        self,
        store: RunStore,
        trainjobs: Mapping[str, Informer],
        fetch: Callable[[str, str], Obj | None],
        guard: Callable[[], None],
        grace: float = SUBMISSION_GRACE,
    ) -> None:
        self.store, self.trainjobs, self.fetch, self.guard = store, trainjobs, fetch, guard
        self.grace = grace

    def sweep(self, now: float) -> list[str]:
        """Fail every pending submission older than the grace period whose TrainJob does
        not exist; settle those that need nothing. The ids failed."""
        if not self.store.file(MARKED_EARLIER).exists():
            self.guard()
            self.mark_earlier()
        failed = []
        for job_id, marked in self.store.pending():
            if now - marked < self.grace:
                break  # oldest first: the rest are younger
            self.guard()
            try:
                if self._settle(job_id, now):
                    failed.append(job_id)
            except Exception as exc:  # one job's trouble never holds the others; next resync
                log.warning("pending submission %s not settled: %r", job_id, exc)
        return failed

    def mark_earlier(self) -> list[str]:
        """Mark pending, as of their submission, the jobs of this controller's namespaces that
        no TrainJob ever took up (neither bound nor with an event): directories of versions
        before the marks, whose stranded ones nothing would find otherwise. Once per store;
        the ids marked."""
        marked = []
        for job_id in self.store.ids():
            try:
                path = self.store.locate(job_id)
                if path is None:
                    continue
                run = RunDir(path)
                meta = run.meta()
                if (
                    meta.backend != "kubernetes"
                    or meta.origin.get("namespace") not in self.trainjobs
                ):
                    continue
                mark = self.store.pending_dir / job_id
                if run.submission_path.exists() or mark.exists():
                    continue  # written with its mark
                if (run.path / BINDING).exists() or run.events_path.exists():
                    continue  # taken up
                self.store.pending_dir.mkdir(exist_ok=True)
                mark.touch()
                os.utime(mark, (meta.submitted, meta.submitted))
                marked.append(job_id)
            except Exception as exc:  # one unreadable job never stops the rest
                log.warning("job %s not checked for a pending submission: %r", job_id, exc)
        self.store.file(MARKED_EARLIER).touch()
        if marked:
            log.info("marked %d earlier submissions pending: %s", len(marked), ", ".join(marked))
        return marked

    def _settle(self, job_id: str, now: float) -> bool:
        path = self.store.locate(job_id)
        if path is None:  # taken back, or its writer died before the directory was whole
            self.store.settle(job_id)
            return False
        run = RunDir(path)
        meta = run.meta()
        ns = meta.origin.get("namespace")
        informer = self.trainjobs.get(ns) if isinstance(ns, str) else None
        if informer is None or not isinstance(ns, str):
            return False  # another controller's namespace
        if read_json(run.path / BINDING, None) is not None or run.events().items:
            self.store.settle(job_id)  # bound, or its end recorded already
            return False
        found = informer.get(ns, job_id) or self.fetch(ns, job_id)
        token = run.submission_token()
        theirs = ((found or {}).get("metadata", {}).get("annotations") or {}).get(
            m.ANNOTATION_SUBMISSION
        )
        if found is not None and (token is None or theirs == token):
            return False  # its own TrainJob: its reconcile binds it
        what = (
            f"none named {job_id} in {ns} {now - meta.submitted:.0f} s after its run "
            "directory was written"
            if found is None
            else f"the TrainJob named {job_id} in {ns} is another one"
        )
        why = (
            f"the submission did not complete: its TrainJob was never created ({what}); "
            "submit the job again"
        )
        lc = Lifecycle.from_events(Policy.from_spec(run.spec().spec, readmit=True), [])
        queued = lc.submitted(meta.submitted, "submitted")
        lost = queued.lifecycle.observe(Lost(now, why))
        self.guard()
        run.record([*queued.events, *lost.events], lost.lifecycle.status())
        self.store.settle(job_id)
        log.warning("job %s: %s", job_id, why)
        return True
