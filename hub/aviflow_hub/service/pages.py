"""Browser pages (the caller's jobs with cancel forms, the usage report) and the OpenAPI
document. Pages read the ledger only, and everything they show is escaped."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from html import escape

from aviflow.errors import AccessDenied
from aviflow.records import JobSummary
from aviflow_hub.ledger.html import render_report
from aviflow_hub.ledger.reports import GROUPINGS, usage_report
from aviflow_hub.openapi import openapi_document
from aviflow_hub.service.base import BaseHandler, JsonErrors
from aviflow_hub.service.context import ServiceContext
from aviflow_hub.service.queues import scope_words

HOME_LIMIT = 500  # newest jobs on the page; the API lists all


class PageHandler(BaseHandler):
    """Browser pages: anonymous visitors are sent through the hub's OAuth login."""

    def on_anonymous(self) -> None:
        self.redirect(self.get_login_url())


def job_rows(jobs: list[JobSummary], base: str, xsrf: str) -> str:
    """One table row per job; unfinished ones get a cancel form (pure)."""
    rows = []
    for s in jobs:
        form = ""
        if not s.state.is_finished():
            form = (
                f'<form method="post" action="{escape(base)}jobs/{escape(s.id)}/cancel">'
                f'<input type="hidden" name="_xsrf" value="{escape(xsrf)}">'
                '<button type="submit">Cancel</button></form>'
            )
        cells = (s.id, s.name, s.user, s.queue, s.state.value, f"{s.gpu_seconds / 3600:.3f}")
        rows.append(
            "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + f"<td>{form}</td></tr>"
        )
    return "".join(rows)


class HomePage(PageHandler):
    """Your jobs, each unfinished one with a cancel form (XSRF-protected)."""

    async def get(self) -> None:
        if self._principal is None:
            return
        self.require_scope("read")
        jobs = await self.ctx.run(self.ctx.ledger.summaries, HOME_LIMIT, self.visibility())
        p, base = self.principal, self.ctx.hub_auth.base_url
        head = "".join(
            f"<th>{h}</th>" for h in ("job", "name", "user", "queue", "state", "GPU-hours", "")
        )
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(
            '<!doctype html><html><head><meta charset="utf-8"><title>Aviflow jobs</title></head><body>'
            f"<h1>Aviflow jobs of {escape(p.name)}</h1>"
            f'<p><a href="{escape(base)}report">Usage report</a> &middot; '
            f'<a href="{escape(base)}api/v1/openapi.json">API (OpenAPI)</a></p>'
            f"<table><tr>{head}</tr>{job_rows(jobs, base, self.xsrf_token.decode())}</table>"
            "</body></html>"
        )


class ReportPage(PageHandler):
    async def get(self) -> None:
        if self._principal is None:
            return
        self.require_scope("read")
        attempts = await self.ctx.run(self.ctx.ledger.attempts, self.visibility())
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
    async def post(self, job_id: str) -> None:
        if self._principal is None:
            return
        await self.job_ref(job_id, "cancel")
        await self.ctx.run(self.ctx.backend.cancel, job_id)
        self.redirect(self.ctx.hub_auth.base_url)

    def on_anonymous(self) -> None:
        raise AccessDenied("log in, and post the form with its _xsrf token")


class OpenApiHandler(JsonErrors):
    def initialize(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(openapi_document(self.ctx.hub_auth.base_url)))
