"""The server extension's HTTP handlers (``/aviflow/...``; the contract is in
extensions/README.md). Jupyter's own login and XSRF protect them; errors are JSON
``{"error", "message"}`` with the status of the error's class (:mod:`aviflow.errors`)."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from aviflow.errors import AviflowError, JobNotFound, RequestError
from aviflow.examples.notebook import EXAMPLE_NAME, example_notebook
from aviflow_jupyter.reads import JobReads

AUTH_RESOURCE = "aviflow"
JOB_ID = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
MAX_TAIL = 10_000
MAX_CURSOR = 1 << 53


class AviflowHandler(APIHandler):
    auth_resource = AUTH_RESOURCE

    def initialize(self, reads: JobReads) -> None:
        self.reads = reads

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, AviflowError):
            body = {"error": type(exc).__name__, "message": str(exc)}
        elif isinstance(exc, web.HTTPError) and exc.log_message:
            body = {"error": "RequestError", "message": exc.log_message % exc.args}
        else:
            body = {"error": "ServerError", "message": self._reason}
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def _handle_request_exception(self, e: BaseException) -> None:
        if isinstance(e, AviflowError):  # an expected refusal: its own status, no traceback
            self.log.info("aviflow: %s %s: %s", self.request.method, self.request.path, e)
            self.send_error(e.http_status, exc_info=(type(e), e, e.__traceback__))
            return
        super()._handle_request_exception(e)

    def int_arg(self, name: str, default: int | None, high: int) -> int | None:
        raw = self.get_query_argument(name, None)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            raise RequestError(f"{name} must be a whole number, got {raw[:40]!r}") from None
        if not 0 <= value <= high:
            raise RequestError(f"{name} must be between 0 and {high}, got {value}")
        return value

    def job_id(self, raw: str) -> str:
        if not JOB_ID.match(raw):
            raise JobNotFound(f"no job {raw[:80]!r}: job ids are lowercase letters, digits and -")
        return raw

    def send_json(self, payload: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(payload))


class JobsHandler(AviflowHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        since = self.int_arg("since", 0, MAX_CURSOR) or 0
        changes = await self.reads.jobs(since)
        self.send_json(
            {
                "jobs": changes.jobs,
                "removed": changes.removed,
                "next": changes.next,
                "reset": changes.reset,
                "now": time.time(),
                "backend": self.reads.backend_name,
                "user": self.reads.user,
            }
        )


class QueuesHandler(AviflowHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.send_json({"queues": await self.reads.queues()})


class JobHandler(AviflowHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        self.send_json(await self.reads.job(self.job_id(job_id)))


class LogHandler(AviflowHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str, rank: str) -> None:
        if not rank.isdigit() or len(rank) > 6:
            raise RequestError(f"rank must be a whole number, got {rank[:40]!r}")
        offset = self.int_arg("offset", None, MAX_CURSOR)
        tail = None if offset is not None else self.int_arg("tail", 200, MAX_TAIL)
        self.send_json(await self.reads.log(self.job_id(job_id), int(rank), tail, offset))


class CancelHandler(AviflowHandler):
    @web.authenticated
    @authorized
    async def post(self, job_id: str) -> None:
        answer = await self.reads.cancel(self.job_id(job_id))
        self.send_json(answer, status=202 if answer["cancelled"] else 200)


class ExampleHandler(AviflowHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.send_json({"name": EXAMPLE_NAME, "notebook": example_notebook()})


class NotFoundHandler(AviflowHandler):
    @web.authenticated
    async def get(self, _path: str) -> None:
        raise web.HTTPError(404, "no such Aviflow route: %s", self.request.path)

    post = get


def routes(
    base_url: str, reads: JobReads
) -> list[tuple[str, type[AviflowHandler], dict[str, Any]]]:
    base = base_url.rstrip("/") + "/aviflow/"
    kw = {"reads": reads}
    one = r"([^/]+)"
    return [
        (base + "jobs", JobsHandler, kw),
        (base + "queues", QueuesHandler, kw),
        (base + "example", ExampleHandler, kw),
        (base + f"jobs/{one}", JobHandler, kw),
        (base + f"jobs/{one}/logs/{one}", LogHandler, kw),
        (base + f"jobs/{one}/cancel", CancelHandler, kw),
        (base + "(.*)", NotFoundHandler, kw),
    ]
