"""The parts of one job, read from the backend incrementally.

``status``; ``events?since=N`` and ``metrics?since=N&afterStep=S`` (the answer's ``next`` is
the cursor to pass as ``since`` next time); ``logs`` (ranks with a log) and
``logs/{rank}?tail=N|offset=B`` (a :class:`~aviflow.records.LogChunk`); ``checkpoints``;
``failures``. Parameters are bounded (:mod:`.params`): a bad one is a 400 RequestError.
"""

from __future__ import annotations

import errno
from typing import Any

from aviflow.backends.base import Backend
from aviflow.errors import RequestError
from aviflow_hub.service.base import BaseHandler
from aviflow_hub.service.params import MAX_CURSOR, MAX_RANK, MAX_TAIL_LINES, parse_int

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
    if part == "events":
        events = b.events(job_id, since=args["since"] or 0)
        return {"events": [e.to_dict() for e in events.items], "next": events.next}
    if part == "metrics":
        rows = b.metrics(job_id, since=args["since"] or 0, after_step=args["afterStep"])
        return {"rows": [r.to_dict() for r in rows.items], "next": rows.next}
    if part == "checkpoints":
        return {"checkpoints": [c.to_dict() for c in b.checkpoints(job_id)]}
    if part == "failures":
        return {"failures": [f.to_dict() for f in b.failures(job_id)]}
    return {"ranks": b.ranks(job_id)}


class JobPartHandler(BaseHandler):
    """GET jobs/{id}/{status|events|metrics|checkpoints|failures|logs}."""

    async def get(self, job_id: str, part: str) -> None:
        args = {
            "since": self.int_arg("since", MAX_CURSOR),
            "afterStep": self.int_arg("afterStep", MAX_CURSOR),
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
