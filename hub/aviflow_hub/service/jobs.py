"""Jobs: list (from the ledger), submit, read one, cancel.

``GET jobs?limit=N`` lists the jobs the caller may see, newest first, from the ledger (the
change feed keeps it within a second of the backend); ``user=NAME`` keeps that user's (a
sidebar asks for its user's own: a team admin's newest N are not the team's). ``POST jobs`` checks the whole request
(:mod:`.submission`; a spec problem is a SpecError), the caller's queue (another team's is
403; an unknown one, or one too small for the job, a SpecError) and a ``spec.resumeFrom``
job (one the caller may read, else 404), then submits on the caller's behalf
(``Owner(user, team)``) and records the job in the ledger at once. With an
``Idempotency-Key`` header, a retry returns the job the first request made (and completes
its submission if that one was cut short): :func:`submit_once`. ``GET jobs/{id}`` adds the
backend's current status, the spec and the submission record to the job's summary.
``POST jobs/{id}/cancel`` asks for the end and answers at once (202; see
:class:`CancelHandler`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from tornado.web import stream_request_body

from aviflow.attempts import summarize
from aviflow.backends.base import Backend
from aviflow.bundle import CodeBundle
from aviflow.errors import AccessDenied, RequestError, SpecError
from aviflow.names import label_value
from aviflow.records import JobSummary, Owner
from aviflow.spec import TrainJob
from aviflow.store import new_job_id
from aviflow_hub import authz
from aviflow_hub.ledger.store import Ledger
from aviflow_hub.service.base import BaseHandler
from aviflow_hub.service.params import MAX_LIMIT
from aviflow_hub.service.submission import (
    IDEMPOTENCY_HEADER,
    MAX_BODY_BYTES,
    KeyReused,
    TooLarge,
    idempotency_key,
    parse_submission,
    request_hash,
)

USER_LABEL = "aviflow.dev/user"
TEAM_LABEL = "aviflow.dev/team"
# A body past MAX_BODY_BYTES is read to its end (and dropped) so the client gets its 413;
# past this, the connection is closed.
DRAIN_BYTES = 1 << 30
MAX_USER_CHARS = 255  # JupyterHub's user name column


@stream_request_body
class JobsHandler(BaseHandler):
    def initialize(self, **kw: Any) -> None:
        super().initialize(**kw)
        self._chunks: list[bytes] = []
        self._size = 0
        self._prepared = False

    async def prepare(self) -> None:
        await super().prepare()
        if self.request.method == "POST" and self.request.connection is not None:
            self.request.connection.set_max_body_size(DRAIN_BYTES)
        self._prepared = True

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        # Refused in prepare (a streaming handler prepares as soon as the headers are in):
        # tornado closes the connection after this answer rather than read the body, even
        # an empty GET's, so say so. Otherwise a proxy that keeps its upstream connections
        # alive (configurable-http-proxy) sends the next request on the closed socket and
        # answers it 503 "socket hang up".
        if not self._prepared:
            self.set_header("Connection", "close")
        super().write_error(status_code, **kwargs)

    def data_received(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size <= MAX_BODY_BYTES:
            self._chunks.append(chunk)
        else:
            self._chunks.clear()

    async def get(self) -> None:
        self.require_scope("read")
        limit = self.int_arg("limit", MAX_LIMIT)
        user = self.get_argument("user", None, strip=False)
        if user is not None and not 0 < len(user) <= MAX_USER_CHARS:
            raise RequestError(f"user must be 1 to {MAX_USER_CHARS} characters")
        found = await self.ctx.lanes.ledger.run(
            lambda: self.ctx.ledger.summaries(limit, self.visibility(), user=user)
        )
        self.send_json({"jobs": [s.to_dict() for s in found]})

    async def post(self) -> None:
        self.require_scope("submit")
        key = idempotency_key(self.request.headers.get(IDEMPOTENCY_HEADER))
        if self._size > MAX_BODY_BYTES:
            raise TooLarge(f"the request body is larger than {MAX_BODY_BYTES} bytes")
        raw, self._chunks = b"".join(self._chunks), []
        dry = self.bool_arg("dryRun")
        # up to 90 MiB to decode: not on the loop
        job, bundle = await self.ctx.lanes.writes.run(parse_submission, raw, dry)
        asked = request_hash(job, bundle) if key is not None else ""
        if job.spec.resume_from is not None:  # only from a job the caller may read
            await self.job_ref(job.spec.resume_from.job, "read")
        choice = authz.choose_queue(
            self.principal, job.spec.queue, self.ctx.cfg, job.spec.total_gpus
        )
        if not choice.decision.allowed or choice.team is None:
            if choice.decision.status == 403:
                raise AccessDenied(choice.decision.reason)
            # only the service knows the caller's queues: a spec problem found here
            raise SpecError([f"spec.queue: {choice.decision.reason}"])
        team = choice.team
        data = job.to_dict()
        data["spec"]["queue"] = team.queue
        data["metadata"]["labels"] = {
            **data["metadata"].get("labels", {}),
            USER_LABEL: label_value(self.principal.name),
            TEAM_LABEL: team.name,
        }
        job = TrainJob.from_dict(data)
        if dry:  # when it would start; nothing is created
            found = await self.ctx.lanes.reads.run(self.ctx.backend.forecast, job)
            start = found.to_dict() if found is not None else None
            self.send_json({"dryRun": True, "queue": team.queue, "team": team.name,
                            "expectedStart": start})  # fmt: skip
            return
        owner = Owner(self.principal.name, team.name)
        summary = await self.ctx.lanes.writes.run(
            submit_once, self.ctx.backend, self.ctx.ledger, job, bundle, owner, key, asked
        )
        self.send_json({"id": summary.id, "queue": team.queue, "team": team.name}, status=201)


def submit_once(
    backend: Backend,
    ledger: Ledger,
    job: TrainJob,
    bundle: CodeBundle,
    owner: Owner,
    key: str | None = None,
    asked: str = "",
) -> JobSummary:
    """Submit, and record the job in the ledger in the same call (a lane that refused the
    record after the submission would leave the client without the id of a job it has).

    With an idempotency ``key`` (and ``asked``, the request's hash), the job's id is chosen
    here and recorded with the key first (:meth:`Ledger.claim_key`: per owner, a day): a
    request that comes again with the key gets that id, and the backend completes that
    job's submission if it had not completed (:meth:`Backend.submit`'s ``job_id``), so a
    retry never makes a second job. The key with another request is :class:`KeyReused`."""
    chosen = None
    if key is not None:
        chosen, first = ledger.claim_key(owner.user, key, asked, new_job_id(job.slug))
        if first != asked:
            raise KeyReused(
                f"the {IDEMPOTENCY_HEADER} {key!r} was sent with another submission (another "
                f"spec or code) in the last day: job {chosen}; use a new key for a new job"
            )
    job_id = backend.submit(job, bundle, owner, job_id=chosen)
    summary = summarize(backend.meta(job_id), job, backend.status(job_id), [], time.time())
    ledger.record_job(summary)
    return summary


class JobHandler(BaseHandler):
    async def get(self, job_id: str) -> None:
        summary = await self.job_ref(job_id, "read")
        b = self.ctx.backend
        status, spec, meta = await self.ctx.lanes.reads.run(
            lambda: (b.status(job_id), b.spec(job_id), b.meta(job_id))
        )
        current = replace(
            summary,
            state=status.state,
            attempt=status.attempt,
            message=status.message,
            queue_position=status.queue_position,
            updated=status.updated,
            failure=status.failure,
        )
        self.send_json(
            {
                **current.to_dict(),
                "status": status.to_dict(),
                "spec": spec.to_dict(),
                "meta": meta.to_dict(),
            }
        )


class CancelHandler(BaseHandler):
    """Asks the backend to stop the job (:meth:`~aviflow.backends.base.Backend.request_cancel`)
    and answers at once: 202 with the job's state now (it ends afterwards; clients read its
    status until it is final), or 200 with ``cancelled: false`` when it had already finished."""

    async def post(self, job_id: str) -> None:
        await self.job_ref(job_id, "cancel")
        b, who = self.ctx.backend, self.principal.name
        cancelled, status = await self.ctx.lanes.writes.run(
            lambda: (b.request_cancel(job_id, who), b.status(job_id))
        )
        self.send_json(
            {"id": job_id, "cancelled": cancelled, "state": status.state.value},
            status=202 if cancelled else 200,
        )
