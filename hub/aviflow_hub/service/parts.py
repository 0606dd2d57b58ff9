"""The parts of one job, read from the backend incrementally.

``status``; ``events?since=N&limit=L`` and ``metrics?since=N&afterStep=S&limit=L``, one page
each: at most ``limit`` records (default :data:`~aviflow.paging.PAGE_ROWS`, 1 to
:data:`~aviflow.paging.MAX_PAGE_ROWS`) and :data:`~aviflow.paging.PAGE_BYTES` of them as
JSON, ``{"events"|"rows": [...], "next": N, "more": true|false}``: ``next`` is the cursor to
pass as ``since`` next time, ``more`` says to do so at once (a million logged rows never make
one answer); ``logs`` (ranks with a log) and ``logs/{rank}?tail=N|offset=B`` (a
:class:`~aviflow.records.LogChunk`, at most 1 MiB); ``checkpoints``; ``failures``.
Parameters are bounded (:mod:`.params`): a bad one is a 400 RequestError.
"""

from __future__ import annotations

import errno
from typing import Any

from aviflow.backends.base import Backend
from aviflow.errors import RequestError
from aviflow_hub.service.base import BaseHandler
from aviflow_hub.service.params import (
    MAX_CURSOR,
    MAX_PAGE_ROWS,
    MAX_RANK,
    MAX_TAIL_LINES,
    PAGE_ROWS,
    parse_int,
)

PARTS = ("status", "events", "metrics", "checkpoints", "failures", "logs")


def read_part(b: Backend, job_id: str, part: str, args: dict[str, int | None]) -> dict[str, Any]:
    """The JSON answer for ``GET jobs/{id}/{part}``."""
    try:
        return _read_part(b, job_id, part, args)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EFBIG, errno.EOVERFLOW):
            raise
        # a cursor past what the file system allows (the run store seeks to it)
        raise RequestError(f"since {args['since']} is past the end of the job's {part}") from None


def _read_part(b: Backend, job_id: str, part: str, args: dict[str, int | None]) -> dict[str, Any]:
    if part == "status":
        return b.status(job_id).to_dict()
    since, limit = args["since"] or 0, args["limit"] or PAGE_ROWS
    if part == "events":
        events = b.events(job_id, since, limit)
        return {
            "events": [e.to_dict() for e in events.items],
            "next": events.next,
            "more": events.more,
        }
    if part == "metrics":
        rows = b.metrics(job_id, since, args["afterStep"], limit)
        return {"rows": [r.to_dict() for r in rows.items], "next": rows.next, "more": rows.more}
    if part == "checkpoints":
        return {"checkpoints": [c.to_dict() for c in b.checkpoints(job_id)]}
    if part == "failures":
        return {"failures": [f.to_dict() for f in b.failures(job_id)]}
    return {"ranks": b.ranks(job_id)}


class JobPartHandler(BaseHandler):
    """GET jobs/{id}/{status|events|metrics|checkpoints|failures|logs} (``since``,
    ``afterStep`` and ``limit`` are checked whatever the part)."""

    async def get(self, job_id: str, part: str) -> None:
        args = {
            "since": self.int_arg("since", MAX_CURSOR),
            "afterStep": self.int_arg("afterStep", MAX_CURSOR),
            "limit": self.int_arg("limit", MAX_PAGE_ROWS, minimum=1),
        }
        await self.job_ref(job_id, "read")
        self.send_json(
            await self.ctx.lanes.reads.run(read_part, self.ctx.backend, job_id, part, args)
        )


class LogHandler(BaseHandler):
    """GET jobs/{id}/logs/{rank}?tail=N|offset=B."""

    async def get(self, job_id: str, rank: str) -> None:
        number = parse_int("rank", rank, MAX_RANK)
        tail = self.int_arg("tail", MAX_TAIL_LINES)
        offset = self.int_arg("offset", MAX_CURSOR)
        if tail is not None and offset is not None:
            raise RequestError("give tail or offset, not both")
        await self.job_ref(job_id, "read")
        chunk = await self.ctx.lanes.reads.run(
            lambda: self.ctx.backend.log(job_id, number, tail=tail, offset=offset)
        )
        self.send_json(chunk.to_dict())
