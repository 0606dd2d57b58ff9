"""Exceptions raised by Aviflow. Every message says what was wrong and how to fix it.

Errors cross HTTP as a JSON body (:meth:`AviflowError.to_wire`) and are raised again on the
other side as the same class (:func:`from_wire`), so a refused spec is a ``SpecError`` in a
hub notebook too, and the CLI's exit codes mean the same end to end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

MAX_WIRE_MESSAGE = 4000
MAX_WIRE_PROBLEMS = 20
MAX_WIRE_PROBLEM = 500


class AviflowError(Exception):
    """Base class for every error Aviflow raises on purpose."""

    http_status: ClassVar[int] = 400

    @property
    def problems(self) -> list[str]:
        return [str(self)]

    def to_wire(self) -> dict[str, Any]:
        """``{"error": <class name>, "message": ..., "problems": [...]}`` (cut to size)."""
        return {
            "error": type(self).__name__,
            "message": str(self)[:MAX_WIRE_MESSAGE],
            "problems": [p[:MAX_WIRE_PROBLEM] for p in self.problems[:MAX_WIRE_PROBLEMS]],
        }


class SpecError(AviflowError, ValueError):
    """A TrainJob spec (or an option that builds one) is invalid.

    ``problems`` holds one line per problem, each naming the offending key.
    """

    def __init__(self, problems: list[str] | str) -> None:
        self._problems = [problems] if isinstance(problems, str) else list(problems)
        if len(self._problems) == 1:
            super().__init__(f"invalid TrainJob spec: {self._problems[0]}")
        else:
            super().__init__(
                "invalid TrainJob spec:\n" + "\n".join(f"  - {p}" for p in self._problems)
            )

    @property
    def problems(self) -> list[str]:
        return list(self._problems)


class RequestError(AviflowError, ValueError):
    """A request to aviflow-api is malformed (besides its spec): an unknown key, a bad
    parameter, a body that is not JSON."""


class UnsafeJobFile(RequestError):
    """A file in a job's directory is not one Aviflow reads: a symlink (at any component of
    its path), a FIFO, socket or device, or larger than its bound. The job's own code made it;
    on the wire it is a :class:`RequestError` (400) naming the file."""


class JobNotFound(AviflowError, LookupError):
    """No job with this id exists (or the caller may not see it)."""

    http_status = 404


class BackendError(AviflowError):
    """A backend refused or failed an operation (capacity, missing executables, ...)."""

    http_status = 409


class BackendUnavailable(BackendError):
    """The backend cannot be reached now (aviflow-api down or restarting); try again later."""

    http_status = 503


class StoreNeedsMigration(BackendError):
    """The run store holds jobs in the layout of an earlier version, which reads do not move
    (a read never writes): ``aviflow store migrate`` moves them in."""


class AccessDenied(BackendError, PermissionError):
    """The caller may not do this (a token without the scope, another team's queue)."""

    http_status = 403


WIRE_ERRORS: dict[str, type[AviflowError]] = {
    cls.__name__: cls
    for cls in (
        AviflowError,
        SpecError,
        RequestError,
        JobNotFound,
        BackendError,
        BackendUnavailable,
        AccessDenied,
        StoreNeedsMigration,
    )
}


def from_wire(body: Mapping[str, Any], status: int, fallback: str = "") -> AviflowError:
    """The error a :meth:`AviflowError.to_wire` body stands for (by HTTP status when the
    body names no known class)."""
    message = str(body.get("message") or fallback or f"HTTP {status}")
    cls = WIRE_ERRORS.get(str(body.get("error")))
    if cls is None:
        cls = {404: JobNotFound, 403: AccessDenied, 400: RequestError}.get(status)
        if cls is None:
            cls = BackendUnavailable if status in (502, 503, 504) else BackendError
    if cls is SpecError:
        problems = body.get("problems")
        if isinstance(problems, list) and problems and all(isinstance(p, str) for p in problems):
            return SpecError(problems)
        return SpecError(message.removeprefix("invalid TrainJob spec: "))
    return cls(message)
