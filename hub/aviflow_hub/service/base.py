"""What every aviflow-api handler shares: authentication, authorization and JSON errors.

Every handler identifies the caller with ``HubOAuth`` (an ``Authorization: token ...``
header, or the service's OAuth cookie for browser pages; cookie-authenticated form posts
must carry the ``_xsrf`` token), looks the user's groups up in the hub, and asks
:mod:`aviflow_hub.authz` before touching a job; a job the caller may not see is 404.

Every error is answered as JSON: ``{"status", "error": <class name>, "message", "problems"}``
(:meth:`aviflow.errors.AviflowError.to_wire`, cut to a few KB), which
:func:`aviflow.errors.from_wire` raises again in the notebook as the same class. Routes that
do not exist answer the same way (:class:`NotFound`, the application's default handler).
A 503 (BackendUnavailable: a busy lane, a backend that did not answer in time, a hub that
cannot be reached to check the caller: it restarts) carries ``Retry-After``, and clients try
again.

Every response, pages, JSON, CSV and redirects alike, errors included, carries
:data:`SECURITY_HEADERS` (:class:`SecurityHeaders`): a Content-Security-Policy that allows no
script, plugin, frame, font or connection at all, only the pages' own inline styles, images
from aviflow-api's origin, forms that post back to it, and framing by the hub's origin;
``X-Content-Type-Options: nosniff``, so a log or a JSON body is never sniffed into HTML.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from jupyterhub.services.auth import HubOAuthenticated
from tornado.httpclient import HTTPClientError
from tornado.web import HTTPError, RequestHandler

from aviflow.errors import (
    WIRE_ERRORS,
    AccessDenied,
    AviflowError,
    BackendError,
    BackendUnavailable,
    JobNotFound,
    RequestError,
)
from aviflow.records import JobSummary
from aviflow_hub import authz
from aviflow_hub.authz import JobRef, Principal
from aviflow_hub.service.context import ServiceContext
from aviflow_hub.service.lanes import CALLER, RETRY_AFTER
from aviflow_hub.service.params import check_job_id, parse_int

log = logging.getLogger("aviflow_hub.service")
MAX_MESSAGE = 2000
MAX_PROBLEMS = 20
MAX_PROBLEM = 500
_BY_STATUS: dict[int, type[AviflowError]] = {404: JobNotFound, 403: AccessDenied, 409: BackendError}
HUB_AWAY = (
    "the hub cannot be reached to check who is calling (it may be restarting); "
    "try again in a few seconds"
)
T = TypeVar("T")


async def from_hub(call: Awaitable[T]) -> T:
    """``call``, a question to the hub (who a token is, a user's groups); a hub that cannot
    be reached or fails is :class:`BackendUnavailable` (503, the client tries again), not a
    500 that ends the client's submission (JupyterHub's HubAuth says 500 or 502 then)."""
    try:
        return await call
    except HTTPError as exc:
        away = exc.status_code == 502 or str(exc.log_message).startswith("Failed to connect")
        if not away:
            raise
    except HTTPClientError as exc:  # the service's own request (a 599: no connection)
        if exc.code < 500:
            raise
    except OSError:  # connection refused or reset
        pass
    raise BackendUnavailable(HUB_AWAY)


# What aviflow-api's pages need, and nothing else: their <style> block and style attributes
# (inline SVG charts are part of the document), the cancel forms, which post to aviflow-api,
# and links (navigation is not restricted). No script at all: a job's name or log line that
# escaped escaping would still not run.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "style-src 'unsafe-inline'",
        "img-src 'self'",
        "form-action 'self'",
        "base-uri 'none'",
        "frame-ancestors 'self'",
    )
)
SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
}


def wire_error(
    exc: BaseException | None, status: int, reason: str = ""
) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) for ``exc``: an AviflowError keeps its class and status; a
    tornado HTTPError gets the class its status stands for; anything else is a 500."""
    if isinstance(exc, AviflowError):
        error, status = exc, exc.http_status
    elif isinstance(exc, HTTPError):
        text = exc.log_message % exc.args if exc.log_message and exc.args else exc.log_message
        cls = _BY_STATUS.get(status, BackendError if status >= 500 else RequestError)
        error = cls(text or reason or f"HTTP {status}")
    else:
        error = BackendError("aviflow-api failed on this request; the service log has the details")
    body = error.to_wire()
    return status, {
        "status": status,
        # the nearest class the client knows (TooLarge is a RequestError to it)
        "error": next(c.__name__ for c in type(error).__mro__ if c.__name__ in WIRE_ERRORS),
        "message": body["message"][:MAX_MESSAGE],
        "problems": [p[:MAX_PROBLEM] for p in body["problems"][:MAX_PROBLEMS]],
    }


class SecurityHeaders(RequestHandler):
    """Sends :data:`SECURITY_HEADERS` with every response (tornado sets default headers again
    when it clears a response for an error page)."""

    def set_default_headers(self) -> None:
        super().set_default_headers()
        for name, value in SECURITY_HEADERS.items():
            self.set_header(name, value)

    def set_error_status(self, status: int, exc: BaseException | None) -> None:
        """The error's status, and for a 503 when to try again."""
        self.set_status(status)
        if status == 503:
            self.set_header("Retry-After", str(getattr(exc, "retry_after", RETRY_AFTER)))


class JsonErrors(SecurityHeaders):
    """Errors as JSON bodies (see the module docstring); AviflowErrors logged as one line."""

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        status, body = wire_error(exc, status_code, self._reason)
        self.set_error_status(status, exc)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, AviflowError):
            log.info(
                "%s %s: %s %s",
                self.request.method,
                self.request.path,
                type(value).__name__,
                str(value)[:300],
            )
        else:
            super().log_exception(typ, value, tb)

    def send_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))


class NotFound(JsonErrors):
    """The default handler: a route aviflow-api does not have (any method)."""

    def initialize(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    def prepare(self) -> None:
        raise RequestError(
            f"aviflow-api has no {self.request.method} {self.request.path[:200]}; "
            f"its routes are in {self.ctx.hub_auth.base_url}api/v1/openapi.json"
        )

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        _, body = wire_error(exc, 404)
        body["status"] = 404
        self.set_status(404)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))


class BaseHandler(HubOAuthenticated, JsonErrors):
    """Authentication and shared helpers; handlers use :attr:`principal`."""

    def initialize(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.hub_auth = ctx.hub_auth
        self._principal: Principal | None = None

    async def prepare(self) -> None:
        model = await from_hub(self.hub_auth.get_user(self, sync=False))
        if model:
            try:
                model = self.check_hub_user(model)
            except Exception:  # UserNotAllowed: authenticated, but lacks access to this service
                raise AccessDenied("this token may not access aviflow-api") from None
        self._hub_auth_user_cache = model
        if model is None:
            self.on_anonymous()
            return
        if model.get("kind", "user") != "user":
            raise AccessDenied("only hub users may use aviflow-api")
        if ":" in model["name"]:  # the platform's own owners (kubectl:<user>) have one
            raise AccessDenied(
                "hub usernames with ':' are reserved for the platform's own job owners; "
                "ask your hub admin to rename the user"
            )
        info = await from_hub(self.ctx.hub_user(model["name"]))
        CALLER.set(model["name"])  # this request's task: its lanes' calls count as this user's
        self._principal = Principal(
            name=model["name"],
            groups=frozenset(info.get("groups") or ()),
            admin=bool(info.get("admin")),
            scopes=frozenset(model.get("scopes") or ()),
        )

    def on_anonymous(self) -> None:
        raise AccessDenied("authenticate with a JupyterHub token")

    @property
    def principal(self) -> Principal:
        assert self._principal is not None
        return self._principal

    def require_scope(self, action: authz.Action) -> None:
        if not authz.has_scope(self.principal, action):
            raise AccessDenied(f"this token lacks the scope {authz.scope_for(action)}")

    def visibility(self) -> authz.Visibility:
        return authz.visibility(self.principal, self.ctx.cfg)

    async def job_ref(self, job_id: str, action: authz.Action) -> JobSummary:
        """The job's ledger record, if the caller may do ``action`` on it (else 404 or 403).
        A job the ledger does not have is 404: the change feed adds jobs within a second,
        and a submission records its job at once."""
        check_job_id(job_id)
        found = await self.ctx.lanes.ledger.run(self.ctx.ledger.job, job_id)
        if found is None:
            raise JobNotFound(f"no job {job_id!r}")
        ref = JobRef(found.id, user=found.user, team=found.team, queue=found.queue)
        decision = authz.decide(self.principal, action, ref, self.ctx.cfg)
        if not decision.allowed:
            cls = JobNotFound if decision.status == 404 else AccessDenied
            raise cls(decision.reason)
        return found

    def int_arg(self, name: str, maximum: int, minimum: int = 0) -> int | None:
        """The query parameter ``name`` as an integer from ``minimum`` to ``maximum`` (None:
        absent)."""
        raw = self.get_argument(name, None, strip=False)
        return None if raw is None else parse_int(name, raw, maximum, minimum)

    def bool_arg(self, name: str) -> bool:
        """The query parameter ``name``: ``true`` or ``false`` (absent: false)."""
        return self.choice_arg(name, ("true", "false"), "false") == "true"

    def choice_arg(self, name: str, choices: tuple[str, ...], default: str) -> str:
        value = self.get_argument(name, default, strip=False)
        if value not in choices:
            raise RequestError(f"{name} must be one of {', '.join(choices)}, got {value[:40]!r}")
        return value
