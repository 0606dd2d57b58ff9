"""aviflow-api request handlers (tornado), authenticated by JupyterHub (HubOAuth).

Every handler identifies the caller with ``HubOAuth`` (an ``Authorization: token ...``
header, or the service's OAuth cookie for browser pages; cookie-authenticated form posts
must carry the ``_xsrf`` token), looks the user's groups up in the hub, and asks
:mod:`aviflow_hub.authz` before touching a job. Jobs the caller may not see are 404.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from datetime import UTC, datetime
from html import escape
from pathlib import PurePosixPath
from typing import Any

from jupyterhub.services.auth import HubOAuthenticated
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from tornado.web import HTTPError, RequestHandler

from aviflow.bundle import CodeBundle
from aviflow.errors import AviflowError, BackendError, JobNotFound, SpecError
from aviflow.names import label_value
from aviflow.spec import TrainJob
from aviflow.status import JobState
from aviflow_hub import authz
from aviflow_hub.authz import JobRef, Principal
from aviflow_hub.ledger.attempts import JobInfo
from aviflow_hub.ledger.html import render_report
from aviflow_hub.ledger.metrics import registry_for
from aviflow_hub.ledger.reports import GROUPINGS, attempts_csv, to_csv, usage_report
from aviflow_hub.openapi import openapi_document
from aviflow_hub.service.context import ServiceContext

MAX_BUNDLE_BYTES = 64 << 20
USER_LABEL = "aviflow.dev/user"
TEAM_LABEL = "aviflow.dev/team"


class BaseHandler(HubOAuthenticated, RequestHandler):
    """Authentication and shared helpers; subclasses call :meth:`principal`."""

    def initialize(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.hub_auth = ctx.hub_auth
        self._principal: Principal | None = None

    async def prepare(self) -> None:
        model = await self.hub_auth.get_user(self, sync=False)
        if model:
            try:
                model = self.check_hub_user(model)
            except Exception:  # UserNotAllowed: authenticated, but lacks access to this service
                raise HTTPError(403, "this token may not access aviflow-api") from None
        self._hub_auth_user_cache = model
        if model is None:
            self.on_anonymous()
            return
        if model.get("kind", "user") != "user":
            raise HTTPError(403, "only hub users may use aviflow-api")
        info = await self.ctx.hub_user(model["name"])
        self._principal = Principal(
            name=model["name"], groups=frozenset(info.get("groups") or ()),
            admin=bool(info.get("admin")), scopes=frozenset(model.get("scopes") or ()))

    def on_anonymous(self) -> None:
        raise HTTPError(403, "authenticate with a JupyterHub token")

    @property
    def principal(self) -> Principal:
        assert self._principal is not None
        return self._principal

    async def job_ref(self, job_id: str, action: authz.Action) -> JobRef:
        """The job, if the caller may do ``action`` on it (else 404/403)."""
        row = await self.ctx.run(self.ctx.ledger.job, job_id)
        if row is None:
            try:
                await self.ctx.run(self.ctx.ledger.ingest, self.ctx.backend, [job_id])
            except (JobNotFound, AviflowError):
                pass
            row = await self.ctx.run(self.ctx.ledger.job, job_id)
        if row is None:
            raise HTTPError(404, f"no job {job_id!r}")
        ref = JobRef(job_id, user=row["user"], team=row["team"], queue=row["queue"])
        decision = authz.decide(self.principal, action, ref, self.ctx.cfg)
        if not decision.allowed:
            raise HTTPError(decision.status, decision.reason)
        return ref

    def require_scope(self, action: authz.Action) -> None:
        if not authz.has_scope(self.principal, action):
            raise HTTPError(403, f"this token lacks the scope {authz._SCOPE_FOR[action]}")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        reason = self._reason
        exc = kwargs.get("exc_info", (None, None))[1]
        if isinstance(exc, HTTPError) and exc.log_message:
            reason = exc.log_message
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"status": status_code, "message": reason}))

    def send_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))


def _summary(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["job_id"], "name": row["name"], "user": row["user"], "team": row["team"],
            "queue": row["queue"], "nodes": row["nodes"], "gpus": row["gpus"],
            "submitted": row["submitted"], "state": row["state"]}


class JobsHandler(BaseHandler):
    async def get(self) -> None:
        self.require_scope("read")
        await self.ctx.run(self.ctx.ledger.ingest, self.ctx.backend)
        rows = await self.ctx.run(self.ctx.ledger.jobs)
        p, cfg = self.principal, self.ctx.cfg
        visible = [_summary(r) for r in rows
                   if authz.can_see(p, JobRef(r["job_id"], r["user"], r["team"]), cfg)]
        self.send_json({"jobs": visible})

    async def post(self) -> None:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            raise HTTPError(400, "the body must be JSON") from None
        if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
            raise HTTPError(400, "the body must be {\"spec\": <TrainJob>, \"bundle\": {...}}")
        try:
            job = TrainJob.from_dict(body["spec"])
        except SpecError as exc:
            raise HTTPError(400, str(exc)) from None
        choice = authz.choose_queue(self.principal, job.spec.queue, self.ctx.cfg, job.spec.total_gpus)
        if not choice.decision.allowed or choice.team is None:
            raise HTTPError(choice.decision.status, choice.decision.reason)
        team = choice.team
        data = job.to_dict()
        data["spec"]["queue"] = team.queue
        data["metadata"]["labels"] = {**data["metadata"].get("labels", {}),
                                      USER_LABEL: label_value(self.principal.name),
                                      TEAM_LABEL: team.name}
        job = TrainJob.from_dict(data)
        bundle = _bundle_from(body.get("bundle") or {}, self.principal.name, team.name)
        try:
            job_id = await self.ctx.run(self.ctx.backend.submit, job, bundle)
        except BackendError as exc:
            raise HTTPError(400, str(exc)) from None
        meta = await self.ctx.run(self.ctx.backend.meta, job_id)
        info = JobInfo(job_id=job_id, user=self.principal.name, team=team.name, queue=team.queue,
                       nodes=job.spec.nodes, gpus=job.spec.total_gpus,
                       submitted=float(meta.get("submitted", time.time())), name=job.metadata.name)
        await self.ctx.run(self.ctx.ledger.record_job, info)
        self.send_json({"id": job_id, "queue": team.queue, "team": team.name}, status=201)


def _bundle_from(raw: Any, user: str, team: str) -> CodeBundle:
    if not isinstance(raw, dict):
        raise HTTPError(400, "bundle must be an object")
    files_in = raw.get("files") or {}
    if not isinstance(files_in, dict):
        raise HTTPError(400, "bundle.files must map file names to base64 content")
    files: dict[str, bytes] = {}
    total = 0
    for name, b64 in files_in.items():
        path = PurePosixPath(str(name))
        if (not name or path.is_absolute() or ".." in path.parts or "\x00" in name
                or not isinstance(b64, str)):
            raise HTTPError(400, f"bundle.files: {name!r} is not a relative path inside the bundle")
        try:
            files[str(path)] = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise HTTPError(400, f"bundle.files[{name!r}] is not base64") from None
        total += len(files[str(path)])
        if total > MAX_BUNDLE_BYTES:
            raise HTTPError(413, f"the bundle is larger than {MAX_BUNDLE_BYTES} bytes")
    entrypoint = raw.get("entrypoint")
    accelerate_config = raw.get("accelerateConfig")
    for key, value in (("entrypoint", entrypoint), ("accelerateConfig", accelerate_config)):
        if value is not None and value not in files:
            raise HTTPError(400, f"bundle.{key} {value!r} is not one of bundle.files")
    origin = raw.get("origin") or {}
    if not isinstance(origin, dict):
        raise HTTPError(400, "bundle.origin must be an object")
    origin = {**origin, "hub": {"user": user, "team": team}}
    return CodeBundle(files=files, entrypoint=entrypoint, accelerate_config=accelerate_config,
                      origin=origin)


class JobHandler(BaseHandler):
    async def get(self, job_id: str) -> None:
        await self.job_ref(job_id, "read")
        b = self.ctx.backend
        status = await self.ctx.run(b.status, job_id)
        await self.ctx.run(self.ctx.ledger.ingest, b, [job_id])
        row = await self.ctx.run(self.ctx.ledger.job, job_id)
        spec = await self.ctx.run(b.spec, job_id)
        meta = await self.ctx.run(b.meta, job_id)
        self.send_json({**_summary(row), "status": status, "spec": spec.to_dict(), "meta": meta})


class JobPartHandler(BaseHandler):
    """GET /jobs/{id}/{events|metrics|checkpoints|failures|logs}."""

    async def get(self, job_id: str, part: str) -> None:
        await self.job_ref(job_id, "read")
        b = self.ctx.backend
        if part == "events":
            events = await self.ctx.run(b.events, job_id)
            self.send_json({"events": [e.to_dict() for e in events]})
        elif part == "metrics":
            self.send_json({"rows": await self.ctx.run(b.metrics, job_id)})
        elif part == "checkpoints":
            self.send_json({"checkpoints": await self.ctx.run(b.checkpoints, job_id)})
        elif part == "failures":
            self.send_json({"failures": await self.ctx.run(b.failures, job_id)})
        elif part == "logs":
            self.send_json({"ranks": await self.ctx.run(b.ranks, job_id)})
        else:
            raise HTTPError(404)


class LogHandler(BaseHandler):
    async def get(self, job_id: str, rank: str) -> None:
        await self.job_ref(job_id, "read")
        text = await self.ctx.run(self.ctx.backend.log_text, job_id, int(rank))
        tail = self.get_argument("tail", None)
        if tail is not None:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(tail):]) if int(tail) > 0 else ""
        self.send_json({"rank": int(rank), "text": text})


class CancelHandler(BaseHandler):
    async def post(self, job_id: str) -> None:
        await self.job_ref(job_id, "cancel")
        cancelled = await self.ctx.run(self.ctx.backend.cancel, job_id)
        await self.ctx.run(self.ctx.ledger.ingest, self.ctx.backend, [job_id])
        row = await self.ctx.run(self.ctx.ledger.job, job_id)
        self.send_json({"id": job_id, "cancelled": cancelled, "state": row["state"]})


class QueuesHandler(BaseHandler):
    async def get(self) -> None:
        self.require_scope("read")
        await self.ctx.run(self.ctx.ledger.ingest, self.ctx.backend)
        rows = await self.ctx.run(self.ctx.ledger.jobs)
        p, cfg = self.principal, self.ctx.cfg
        out = []
        for team in authz.visible_queues(p, cfg):
            mine = [r for r in rows if r["queue"] == team.queue]
            in_use = sum(r["gpus"] for r in mine if JobState(r["state"]).is_active())
            pending = [r for r in mine if r["state"] == JobState.QUEUED]
            listed = [{"id": r["job_id"], "user": r["user"], "position": i + 1, "gpus": r["gpus"]}
                      for i, r in enumerate(pending)
                      if authz.can_see(p, JobRef(r["job_id"], r["user"], r["team"]), cfg)]
            out.append({"team": team.name, "queue": team.queue, "gpuQuota": team.gpu_quota,
                        "gpusInUse": in_use, "pendingCount": len(pending), "pending": listed})
        self.send_json({"queues": out})


def _filtered_attempts(ctx: ServiceContext, p: Principal) -> list[Any]:
    ctx.ledger.ingest(ctx.backend)
    seen = authz.visibility(p, ctx.cfg)
    return [a for a in ctx.ledger.attempts() if seen.allows(a.user, a.team)]


def _scope_words(p: Principal, cfg: Any) -> str:
    if p.admin:
        return "all teams"
    teams = authz.administered_teams(p, cfg)
    return f"your jobs and team(s) {', '.join(teams)}" if teams else "your jobs"


class UsageHandler(BaseHandler):
    async def get(self) -> None:
        self.require_scope("read")
        by = self.get_argument("by", "team")
        fmt = self.get_argument("format", "json")
        if by not in (*GROUPINGS, "attempt"):
            raise HTTPError(400, f"by must be one of {', '.join((*GROUPINGS, 'attempt'))}")
        attempts = await self.ctx.run(_filtered_attempts, self.ctx, self.principal)
        now = time.time()
        if by == "attempt":
            if fmt == "csv":
                self.set_header("Content-Type", "text/csv; charset=utf-8")
                self.finish(attempts_csv(attempts, now))
            else:
                self.send_json({"by": by, "rows": [{**a.to_dict(), "gpu_seconds": a.gpu_seconds(now)}
                                                   for a in attempts]})
            return
        rows = usage_report(attempts, by, now)  # type: ignore[arg-type]
        if fmt == "csv":
            self.set_header("Content-Type", "text/csv; charset=utf-8")
            self.set_header("Content-Disposition", f'attachment; filename="aviflow-usage-by-{by}.csv"')
            self.finish(to_csv(rows, by))  # type: ignore[arg-type]
        else:
            self.send_json({"by": by, "scope": _scope_words(self.principal, self.ctx.cfg), "rows": rows})


class PageHandler(BaseHandler):
    """Browser pages: anonymous visitors are sent through the hub's OAuth login."""

    def on_anonymous(self) -> None:
        self.redirect(self.get_login_url())


class ReportPage(PageHandler):
    async def get(self) -> None:
        if self._principal is None:
            return
        self.require_scope("read")
        attempts = await self.ctx.run(_filtered_attempts, self.ctx, self.principal)
        now = time.time()
        sections = {by: usage_report(attempts, by, now) for by in GROUPINGS}
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(render_report(
            sections, viewer=self.principal.name, scope=_scope_words(self.principal, self.ctx.cfg),
            generated=datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            csv_base=self.ctx.hub_auth.base_url + "api/v1/usage"))


class HomePage(PageHandler):
    """Your jobs, each unfinished one with a cancel form (XSRF-protected)."""

    async def get(self) -> None:
        if self._principal is None:
            return
        self.require_scope("read")
        await self.ctx.run(self.ctx.ledger.ingest, self.ctx.backend)
        rows = await self.ctx.run(self.ctx.ledger.jobs)
        p, cfg, base = self.principal, self.ctx.cfg, self.ctx.hub_auth.base_url
        items = []
        for r in rows:
            if not authz.can_see(p, JobRef(r["job_id"], r["user"], r["team"]), cfg):
                continue
            form = ""
            if not JobState(r["state"]).is_finished():
                form = (f'<form method="post" action="{escape(base)}jobs/{escape(r["job_id"])}/cancel">'
                        f'<input type="hidden" name="_xsrf" value="{escape(self.xsrf_token.decode())}">'
                        '<button type="submit">Cancel</button></form>')
            items.append(f"<tr><td>{escape(r['job_id'])}</td><td>{escape(r['user'])}</td>"
                         f"<td>{escape(r['queue'])}</td><td>{escape(r['state'])}</td><td>{form}</td></tr>")
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>Aviflow jobs</title></head><body>"
            f"<h1>Aviflow jobs of {escape(p.name)}</h1>"
            f'<p><a href="{escape(base)}report">Usage report</a> &middot; '
            f'<a href="{escape(base)}api/v1/openapi.json">API (OpenAPI)</a></p>'
            "<table><tr><th>job</th><th>user</th><th>queue</th><th>state</th><th></th></tr>"
            f"{''.join(items)}</table></body></html>")


class CancelForm(PageHandler):
    async def post(self, job_id: str) -> None:
        if self._principal is None:
            return
        await self.job_ref(job_id, "cancel")
        await self.ctx.run(self.ctx.backend.cancel, job_id)
        await self.ctx.run(self.ctx.ledger.ingest, self.ctx.backend, [job_id])
        self.redirect(self.ctx.hub_auth.base_url)

    def on_anonymous(self) -> None:
        raise HTTPError(403, "log in, and post the form with its _xsrf token")


class MetricsHandler(BaseHandler):
    async def get(self) -> None:
        self.require_scope("read")
        if not self.principal.admin:
            raise HTTPError(403, "metrics are for hub admins")
        await self.ctx.run(self.ctx.ledger.ingest, self.ctx.backend)
        body = await self.ctx.run(generate_latest, registry_for(self.ctx.ledger))
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(body)


class OpenApiHandler(RequestHandler):
    def initialize(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(openapi_document(self.ctx.hub_auth.base_url)))
