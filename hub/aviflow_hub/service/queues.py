"""Queues, usage and Prometheus metrics, all read from the ledger; the trainer images.

``GET queues``: one :class:`~aviflow.records.QueueQuota` per queue the caller may use (hub
admins: every team's): the team's GPU quota from the config, GPUs held by its started jobs,
its waiting jobs (each with its position; only those the caller may see are listed), and of
the GPUs it holds those borrowed from its cohort and the GPUs its cohort lends it now, as the
backend last reported them (:mod:`.queue_reports`; Kueue on the cluster, none elsewhere).
``GET images``: the backend's trainer images (:meth:`~aviflow.backends.base.Backend.images`),
the default first, for ``--image`` and the notebook's version check.
``GET usage?by=team|user|day|week|attempt&format=json|csv``: allocated GPU-hours of the
attempts the caller may see.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from aviflow.attempts import AttemptRecord
from aviflow.errors import AccessDenied
from aviflow.records import JobState, JobSummary, PendingJob, QueueQuota
from aviflow_hub import authz
from aviflow_hub.authz import Principal
from aviflow_hub.config import HubConfig
from aviflow_hub.ledger.metrics import registry_for
from aviflow_hub.ledger.reports import GROUPINGS, attempts_csv, to_csv, usage_report
from aviflow_hub.ledger.store import Ledger
from aviflow_hub.service.base import BaseHandler

USAGE_BY = (*GROUPINGS, "attempt")
FORMATS = ("json", "csv")


def queue_quotas(
    p: Principal,
    cfg: HubConfig,
    unfinished: list[JobSummary],
    reported: Mapping[str, QueueQuota] | None = None,
) -> list[QueueQuota]:
    """The queues ``p`` may use, from the unfinished jobs of the ledger and what the backend
    reported of each (``reported``, by queue: the GPUs it borrows, at most those it holds,
    what its cohort lends it, and its waiting jobs in Kueue's order; pure). The waiting jobs
    are in :func:`waiting_order`."""
    seen = authz.visibility(p, cfg)
    oldest_first = sorted(unfinished, key=lambda s: (s.submitted, s.id))
    out = []
    for team in authz.visible_queues(p, cfg):
        mine = [s for s in oldest_first if s.queue == team.queue]
        report = (reported or {}).get(team.queue)
        waiting = waiting_order([s for s in mine if s.state is JobState.QUEUED], report)
        in_use = sum(s.gpus for s in mine if s.state.is_active())
        out.append(
            QueueQuota(
                queue=team.queue,
                gpu_quota=team.gpu_quota,
                gpus_in_use=in_use,
                pending_count=len(waiting),
                team=team.name,
                borrowed=min(max(0, report.borrowed), in_use) if report else 0,
                lendable=max(0, report.lendable) if report else 0,
                pending=tuple(
                    PendingJob(s.id, s.user, position=i + 1, gpus=s.gpus)
                    for i, s in enumerate(waiting)
                    if seen.allows(s.user, s.team)
                ),
            )
        )
    return out


def waiting_order(waiting: list[JobSummary], report: QueueQuota | None) -> list[JobSummary]:
    """A queue's waiting jobs (oldest first), first in line first: in the order the backend
    last reported (Kueue's visibility API), else by the position the controller gave each job
    (its Workload's place), else oldest first; a job with no place goes after those with one.

    >>> from aviflow.records import PendingJob
    >>> def job(i, t, pos=None):
    ...     return JobSummary(i, i, "u", None, "q", 1, 1, JobState.QUEUED, submitted=t,
    ...                       queue_position=pos)
    >>> jobs = [job("a", 1.0, 2), job("b", 2.0, 1), job("c", 3.0)]
    >>> [s.id for s in waiting_order(jobs, None)]
    ['b', 'a', 'c']
    >>> kueue = QueueQuota("q", 8, pending=(PendingJob("c", "u", 1, 1), PendingJob("a", "u", 2, 1)))
    >>> [s.id for s in waiting_order(jobs, kueue)]
    ['c', 'a', 'b']
    """
    reported = {p.id: p.position for p in report.pending} if report else {}
    last = float("inf")

    def place(s: JobSummary) -> float:
        if reported:
            return reported.get(s.id, last)
        return last if s.queue_position is None else s.queue_position

    return sorted(waiting, key=place)  # stable: oldest first among equals


def read_quotas(
    ledger: Ledger,
    p: Principal,
    cfg: HubConfig,
    reported: Mapping[str, QueueQuota] | None = None,
) -> list[QueueQuota]:
    """:func:`queue_quotas` from the ledger's unfinished jobs (blocks: run it in the pool)."""
    return queue_quotas(p, cfg, ledger.summaries(unfinished=True), reported)


class QueuesHandler(BaseHandler):
    async def get(self) -> None:
        self.require_scope("read")
        quotas = await self.ctx.lanes.ledger.run(
            read_quotas,
            self.ctx.ledger,
            self.principal,
            self.ctx.cfg,
            self.ctx.queue_reports.latest(),
        )
        self.send_json({"queues": [q.to_dict() for q in quotas]})


class ImagesHandler(BaseHandler):
    async def get(self) -> None:
        self.require_scope("read")
        images = await self.ctx.lanes.reads.run(self.ctx.backend.images)
        self.send_json({"images": [i.to_dict() for i in images]})


def scope_words(p: Principal, cfg: HubConfig) -> str:
    if p.admin:
        return "all teams"
    teams = authz.administered_teams(p, cfg)
    return f"your jobs and team(s) {', '.join(teams)}" if teams else "your jobs"


def attempt_rows(attempts: list[AttemptRecord], now: float) -> list[dict[str, Any]]:
    return [{**a.to_dict(), "gpu_seconds": a.gpu_seconds(now)} for a in attempts]


class UsageHandler(BaseHandler):
    async def get(self) -> None:
        self.require_scope("read")
        by = self.choice_arg("by", USAGE_BY, "team")
        fmt = self.choice_arg("format", FORMATS, "json")
        attempts = await self.ctx.lanes.ledger.run(self.ctx.ledger.attempts, self.visibility())
        now = time.time()
        if by == "attempt":
            if fmt == "csv":
                self.set_header("Content-Type", "text/csv; charset=utf-8")
                self.finish(attempts_csv(attempts, now))
            else:
                self.send_json({"by": by, "rows": attempt_rows(attempts, now)})
            return
        rows = usage_report(attempts, by, now)  # type: ignore[arg-type]
        if fmt == "csv":
            self.set_header("Content-Type", "text/csv; charset=utf-8")
            self.set_header(
                "Content-Disposition", f'attachment; filename="aviflow-usage-by-{by}.csv"'
            )
            self.finish(to_csv(rows, by))  # type: ignore[arg-type]
        else:
            self.send_json(
                {"by": by, "scope": scope_words(self.principal, self.ctx.cfg), "rows": rows}
            )


class MetricsHandler(BaseHandler):
    """Prometheus metrics of the ledger (hub admins)."""

    async def get(self) -> None:
        self.require_scope("read")
        if not self.principal.admin:
            raise AccessDenied("metrics are for hub admins")
        body = await self.ctx.lanes.ledger.run(generate_latest, registry_for(self.ctx.ledger))
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(body)
