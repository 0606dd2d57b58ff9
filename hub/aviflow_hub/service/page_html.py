"""aviflow-api's browser pages as HTML: pure functions of records, no scripts, no external assets.

The job list (:func:`home_html`) shows what the JupyterLab sidebar shows: each queue as a bar
(:mod:`aviflow.views.queue_bar`, the sidebar's own: GPUs in use within the nominal quota,
borrowed beyond it, asked for by the waiting jobs, idle in the cohort; then the jobs waiting)
and each job with its status badge, queue position and reason (a queued one's expected start
and its queue's numbers: :func:`aviflow.views.sections.waiting_html`), first failing rank,
size, elapsed time and GPU-hours. The job page (:func:`job_page_html`) is the notebook panel's own rendering
(:func:`aviflow.views.sections.sections_html`) plus each rank's last log lines. Badges,
durations and sections come from :mod:`aviflow.views`; the look is the usage report's
(:data:`aviflow_hub.ledger.html.REPORT_CSS`). Everything interpolated is escaped, numbers too
(:func:`aviflow.views.html.num`): a record's fields are only as typed as what wrote them. The
pages carry no script; aviflow-api sends them with a Content-Security-Policy that allows none
(:data:`aviflow_hub.service.base.SECURITY_HEADERS`).

>>> from aviflow.records import QueueQuota
>>> queue_bar(QueueQuota("qa", gpu_quota=4, gpus_in_use=1, team="a"))[:40]
'<div class="queue" data-queue="qa"><b>a<'
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from urllib.parse import quote

from aviflow.records import JobState, JobSummary, QueueQuota
from aviflow.views.html import badge, duration, esc, num
from aviflow.views.queue_bar import pct_css, waiting_rows
from aviflow.views.queue_bar import queue_bar as bar_view
from aviflow.views.sections import log_html, sections_html, waiting_html
from aviflow.views.snapshot import JobSnapshot
from aviflow_hub.ledger.html import REPORT_CSS

PAGE_CSS = REPORT_CSS + (
    "table.jobs td{text-align:left;vertical-align:top}table.jobs td.num{text-align:right}"
    ".detail{font-size:12px;color:#4b5563;max-width:36em}.detail.failed{color:#b91c1c}"
    "code{font-size:12px;color:#4b5563}nav{margin:0 0 1em}form{margin:0}"
    ".queue{margin:4px 0}.bar{display:inline-block;width:320px;height:14px;"
    "background:#e5e7eb;border-radius:3px;overflow:hidden;vertical-align:middle;margin:0 8px}"
    ".bar{position:relative;display:inline-flex}.bar span{display:inline-block;height:100%}"
    ".bar .used{background:#4c78a8}.bar .borrowed{background:#f58518}"
    ".bar .pending{background:repeating-linear-gradient(45deg,#9ecae9,#9ecae9 3px,#e5e7eb 3px,"
    "#e5e7eb 6px)}.bar .quota{position:absolute;top:0;bottom:0;width:2px;background:#374151}"
    "section{margin:1.2em 0}h2{font-size:1.1em}"
    "h3{font-size:.95em;margin:.6em 0 .2em}"
)
MAX_PENDING_SHOWN = 10
READ_ON_SECONDS = 2  # a job page that has not read all the job logged reloads itself after


def page_html(title: str, body: str, reload_after: int | None = None) -> str:
    """A whole page: ``title`` is text (escaped here), ``body`` is HTML; ``reload_after``:
    the browser loads the page again after that many seconds (no script: a meta refresh)."""
    reload = (
        f'<meta http-equiv="refresh" content="{int(reload_after)}">'
        if reload_after is not None
        else ""
    )
    return (
        f'<!doctype html><html><head><meta charset="utf-8">{reload}<title>{esc(title)}</title>'
        f"<style>{PAGE_CSS}</style></head><body>{body}</body></html>"
    )


def nav_html(base: str) -> str:
    b = esc(base)
    return (
        f'<nav><a href="{b}">Jobs</a> &middot; <a href="{b}report">Usage report</a> &middot; '
        f'<a href="{b}api/v1/openapi.json">API (OpenAPI)</a></nav>'
    )


def job_url(base: str, job_id: str) -> str:
    """The job page's path (not escaped)."""
    return f"{base}jobs/{quote(job_id, safe='')}"


def cancel_form(base: str, job_id: str, xsrf: str, back: str = "") -> str:
    """A POST form that cancels the job (``back="job"``: then return to the job's page)."""
    field = f'<input type="hidden" name="back" value="{esc(back)}">' if back else ""
    return (
        f'<form method="post" action="{esc(job_url(base, job_id))}/cancel">'
        f'<input type="hidden" name="_xsrf" value="{esc(xsrf)}">{field}'
        '<button type="submit">Cancel</button></form>'
    )


def queue_bar(q: QueueQuota) -> str:
    """One queue as the sidebar shows it (:func:`aviflow.views.queue_bar.queue_bar`: GPUs in use
    within the quota, borrowed beyond it, asked for by the waiting jobs, the quota's mark, the
    words), then its waiting jobs."""
    view = bar_view(q)
    segments = "".join(
        f'<span class="{cls}" style="width:{esc(pct_css(width))}"></span>'
        for cls, width in (
            ("used", view.in_quota_pct),
            ("borrowed", view.borrowed_pct),
            ("pending", view.pending_pct),
        )
    )
    mark = (
        ""
        if view.quota_pct is None
        else f'<span class="quota" style="left:{esc(pct_css(view.quota_pct))}"></span>'
    )
    bar = f'<span class="bar">{segments}{mark}</span>'
    rows, more = waiting_rows(q, MAX_PENDING_SHOWN)
    waiting = ""
    if rows:
        shown = ", ".join(
            f"{num(r.position)}. {esc(r.user)} <code>{esc(r.id)}</code> ({num(r.gpus)} GPUs)"
            for r in rows
        )
        waiting = (
            f'<div class="detail">waiting: {shown}'
            f"{f', and {num(more)} more' if more > 0 else ''}</div>"
        )
    return (
        f'<div class="queue" data-queue="{esc(q.queue)}"><b>{esc(q.team or "")}</b> '
        f"<code>{esc(q.queue)}</code>{bar}<span>{esc(view.label)}</span>{waiting}</div>"
    )


def queues_html(quotas: Sequence[QueueQuota]) -> str:
    if not quotas:
        return '<section id="queues"><h2>Queues</h2><p>You are in no team\'s queue.</p></section>'
    bars = "".join(queue_bar(q) for q in quotas)
    return f'<section id="queues"><h2>Queues</h2>{bars}</section>'


def job_detail(s: JobSummary, now: float) -> str:
    """Why a queued job waits (with when it is expected to start and its queue's numbers, as
    on its page), where a failed one failed first, else its message."""
    if s.state is JobState.QUEUED:
        where = f"position {num(s.queue_position)} in the queue" if s.queue_position else "queued"
        why = f": {esc(s.message)}" if s.message else ""
        more = waiting_html(s.expected_start, s.wait, now)
        return f'<div class="detail">{where}{why}{more}</div>'
    if s.state is JobState.FAILED and s.failure is not None:
        what = s.failure.what()
        return (
            f'<div class="detail failed">first failure: {esc(s.failure.where())}'
            f"{f' &mdash; {esc(what)}' if what else ''}</div>"
        )
    if s.message and s.state is not JobState.RUNNING:
        return f'<div class="detail">{esc(s.message)}</div>'
    return ""


def elapsed(s: JobSummary, now: float) -> str:
    """From submission to the end (or ``now``); empty when the submission time is unknown."""
    if not s.submitted:
        return ""
    return duration(max(0.0, (s.finished or now) - s.submitted))


def job_row(s: JobSummary, base: str, xsrf: str, now: float) -> str:
    """One table row (see :data:`JOB_COLUMNS`); an unfinished job gets a cancel form."""
    form = "" if s.state.is_finished() else cancel_form(base, s.id, xsrf)
    link = f'<a href="{esc(job_url(base, s.id))}">{esc(s.name or s.id)}</a>'
    where = esc(s.queue) if not s.team else f"{esc(s.team)} / {esc(s.queue)}"
    return (
        f'<tr data-job="{esc(s.id)}"><td>{link}<br><code>{esc(s.id)}</code></td>'
        f"<td>{esc(s.user)}</td><td>{where}</td>"
        f"<td>{badge(s.state.value)}{job_detail(s, now)}</td>"
        f"<td>{num(s.nodes)}&times;{num(s.gpus_per_node)} GPUs</td>"
        f'<td class="num">{esc(elapsed(s, now))}</td>'
        f'<td class="num">{num(s.gpu_seconds / 3600, ".3f")}</td><td>{form}</td></tr>'
    )


JOB_COLUMNS = ("job", "user", "team / queue", "state", "size", "elapsed", "GPU-hours", "")


def job_rows(jobs: Sequence[JobSummary], base: str, xsrf: str, now: float | None = None) -> str:
    """The rows of :func:`job_row` (``now``: the time elapsed runs to; None: the clock)."""
    at = time.time() if now is None else now
    return "".join(job_row(s, base, xsrf, at) for s in jobs)


def jobs_html(jobs: Sequence[JobSummary], base: str, xsrf: str, now: float) -> str:
    if not jobs:
        return '<section id="jobs"><h2>Jobs</h2><p>No jobs yet.</p></section>'
    head = "".join(f"<th>{esc(h)}</th>" for h in JOB_COLUMNS)
    return (
        f'<section id="jobs"><h2>Jobs</h2><table class="jobs"><thead><tr>{head}</tr></thead>'
        f"<tbody>{job_rows(jobs, base, xsrf, now)}</tbody></table></section>"
    )


def home_html(
    *,
    viewer: str,
    scope: str,
    quotas: Sequence[QueueQuota],
    jobs: Sequence[JobSummary],
    base: str,
    xsrf: str,
    now: float,
) -> str:
    """The service's front page: the viewer's queues, then the jobs they may see."""
    return page_html(
        "Aviflow jobs",
        f"<h1>Aviflow jobs of {esc(viewer)}</h1>{nav_html(base)}"
        f"<p>Scope: {esc(scope)}</p>"
        f"{queues_html(quotas)}{jobs_html(jobs, base, xsrf, now)}",
    )


def logs_html(logs: Sequence[tuple[int, str]], total: int) -> str:
    """Each shown rank's log tail; a note when only the first of ``total`` ranks are shown."""
    if not logs:
        return "<p>No rank has written a log yet.</p>"
    shown = len(logs)
    note = (
        f"<p>Showing the logs of {num(shown)} of {num(total)} ranks.</p>" if total > shown else ""
    )
    return note + "".join(
        f'<div class="rank-log" data-rank="{num(rank)}"><h3>rank {num(rank)}</h3>'
        f"{log_html(text)}</div>"
        for rank, text in logs
    )


def job_page_html(
    snap: JobSnapshot,
    summary: JobSummary,
    logs: Sequence[tuple[int, str]],
    total_ranks: int,
    *,
    base: str,
    xsrf: str,
) -> str:
    """One job: the panel's sections, the logs, a cancel form while it is unfinished. A page
    whose snapshot is still catching up with what the job logged (a few pages of events and
    metrics are read a view) reloads itself after :data:`READ_ON_SECONDS`, reading on."""
    parts = sections_html(snap)
    where = (
        esc(summary.queue) if not summary.team else f"{esc(summary.team)} / {esc(summary.queue)}"
    )
    form = "" if snap.state.is_finished() else cancel_form(base, snap.id, xsrf, back="job")
    return page_html(
        f"{snap.name} · Aviflow job",
        f"<h1>Aviflow job {esc(snap.name)}</h1>{nav_html(base)}"
        f'<p><a href="{esc(base)}">&larr; all jobs</a> &middot; user {esc(summary.user)}'
        f" &middot; {where}</p>"
        f'<section id="header">{parts["header"]}{parts["failure"]}{form}</section>'
        f'<section id="charts"><h2>Metrics</h2>{parts["charts"]}</section>'
        f'<section id="ranks"><h2>Ranks</h2>{parts["ranks"]}</section>'
        f'<section id="checkpoints"><h2>Checkpoints</h2>{parts["checkpoints"]}</section>'
        f'<section id="logs"><h2>Logs (last lines)</h2>{logs_html(logs, total_ranks)}</section>',
        reload_after=READ_ON_SECONDS if snap.catching_up else None,
    )


def error_page_html(status: int, error: str, message: str, base: str) -> str:
    """An error as a page (a job the viewer may not see is a 404, as in the API)."""
    return page_html(
        f"{status} · Aviflow",
        f"<h1>{num(status)} {esc(error)}</h1><p>{esc(message)}</p>{nav_html(base)}",
    )
