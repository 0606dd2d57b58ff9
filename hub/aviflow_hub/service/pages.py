"""Browser pages (the job list with queue bars, a page per job, the usage report) and the
OpenAPI document. The job list reads the ledger; a job's page reads the job through the
backend, as the notebook panel does. The HTML is :mod:`.page_html`'s (everything escaped);
errors are pages too (a job the caller may not see is a 404, as in the API)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from aviflow.backends.base import Backend
from aviflow.errors import AccessDenied, UnsafeJobFile
from aviflow.views.snapshot import SnapshotReaders
from aviflow_hub.ledger.html import render_report
from aviflow_hub.ledger.reports import GROUPINGS, usage_report
from aviflow_hub.openapi import openapi_document
from aviflow_hub.service.base import BaseHandler, JsonErrors, wire_error
from aviflow_hub.service.context import ServiceContext
from aviflow_hub.service.page_html import error_page_html, home_html, job_page_html, job_url
from aviflow_hub.service.queues import read_quotas, scope_words

HOME_LIMIT = 500  # newest jobs on the page; the API lists all
LOG_TAIL_LINES = 200
MAX_LOG_RANKS = 8  # ranks whose log a job page shows
READERS_KEPT = 32


class PageHandler(BaseHandler):
    """Browser pages: anonymous visitors are sent through the hub's OAuth login; errors are
    pages."""

    def on_anonymous(self) -> None:
        self.redirect(self.get_login_url())

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        status, body = wire_error(exc, status_code, self._reason)
        self.set_error_status(status, exc)
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(
            error_page_html(status, body["error"], body["message"], self.ctx.hub_auth.base_url)
        )


class HomePage(PageHandler):
    """The caller's queues and the jobs they may see, each unfinished one with a cancel form
    (XSRF-protected)."""

    async def get(self) -> None:
        if self._principal is None:
            return
        self.require_scope("read")
        p, cfg, ledger, now = self.principal, self.ctx.cfg, self.ctx.ledger, time.time()
        seen = self.visibility()
        jobs = await self.ctx.lanes.ledger.run(lambda: ledger.summaries(HOME_LIMIT, seen, now=now))
        reported = self.ctx.queue_reports.latest()
        quotas = await self.ctx.lanes.ledger.run(read_quotas, ledger, p, cfg, reported)
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(
            home_html(
                viewer=p.name,
                scope=scope_words(p, cfg),
                quotas=quotas,
                jobs=jobs,
                base=self.ctx.hub_auth.base_url,
                xsrf=self.xsrf_token.decode(),
                now=now,
            )
        )


def read_logs(backend: Backend, job_id: str) -> tuple[list[tuple[int, str]], int]:
    """The last lines of the first :data:`MAX_LOG_RANKS` ranks' logs, and how many ranks
    have a log."""
    ranks = backend.ranks(job_id)
    logs = []
    for rank in ranks[:MAX_LOG_RANKS]:
        try:
            text = backend.log(job_id, rank, tail=LOG_TAIL_LINES).text
        except UnsafeJobFile as exc:  # the job made its log a symlink or a special file
            text = f"[aviflow: not shown: {exc}]"
        logs.append((rank, text))
    return logs, len(ranks)


class JobPage(PageHandler):
    """One job as the notebook panel shows it, with its logs and a cancel form."""

    def initialize(self, ctx: ServiceContext, readers: SnapshotReaders) -> None:  # type: ignore[override]
        super().initialize(ctx)
        self.readers = readers

    async def get(self, job_id: str) -> None:
        if self._principal is None:
            return
        summary = await self.job_ref(job_id, "read")
        b = self.ctx.backend
        snap = await self.ctx.lanes.reads.run(self.readers.read, b, job_id)
        logs, total = await self.ctx.lanes.reads.run(read_logs, b, job_id)
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(
            job_page_html(
                snap,
                summary,
                logs,
                total,
                base=self.ctx.hub_auth.base_url,
                xsrf=self.xsrf_token.decode(),
            )
        )


class ReportPage(PageHandler):
    async def get(self) -> None:
        if self._principal is None:
            return
        self.require_scope("read")
        attempts = await self.ctx.lanes.ledger.run(self.ctx.ledger.attempts, self.visibility())
        now = time.time()
        sections = {by: usage_report(attempts, by, now) for by in GROUPINGS}
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(
            render_report(
                sections,
                viewer=self.principal.name,
                scope=scope_words(self.principal, self.ctx.cfg),
                generated=datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
                csv_base=self.ctx.hub_auth.base_url + "api/v1/usage",
            )
        )


class CancelForm(PageHandler):
    """Asks for the job's end (as ``POST api/v1/jobs/{id}/cancel``) and goes back to the list
    or the job's page, which show the job ending."""

    async def post(self, job_id: str) -> None:
        if self._principal is None:
            return
        await self.job_ref(job_id, "cancel")
        await self.ctx.lanes.writes.run(
            self.ctx.backend.request_cancel, job_id, self.principal.name
        )
        base = self.ctx.hub_auth.base_url
        back = self.get_body_argument("back", "")
        self.redirect(job_url(base, job_id) if back == "job" else base)

    def on_anonymous(self) -> None:
        raise AccessDenied("log in, and post the form with its _xsrf token")


class OpenApiHandler(JsonErrors):
    def initialize(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(openapi_document(self.ctx.hub_auth.base_url)))
