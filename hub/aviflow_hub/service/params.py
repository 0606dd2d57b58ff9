"""Checking what a request brings before anything acts on it: query parameters, job ids.

Every refusal is an :class:`~aviflow.errors.AviflowError` that names the parameter and never
echoes more than a few dozen characters of the input.

>>> parse_int("tail", "20", MAX_TAIL_LINES)
20
>>> parse_int("rank", "-1", MAX_RANK)
Traceback (most recent call last):
...
aviflow.errors.RequestError: rank must be a whole number from 0 to 4095, got '-1'
>>> parse_int("limit", "0", MAX_PAGE_ROWS, minimum=1)
Traceback (most recent call last):
...
aviflow.errors.RequestError: limit must be a whole number from 1 to 10000, got '0'
"""

from __future__ import annotations

from aviflow._model import short
from aviflow.errors import JobNotFound, RequestError
from aviflow.names import is_dns1123_label
from aviflow.paging import MAX_PAGE_ROWS, PAGE_BYTES, PAGE_ROWS
from aviflow.store import MAX_TAIL_LINES

MAX_RANK = 4095
MAX_CURSOR = 2**53  # byte offsets and steps: exact in a JSON number everywhere
MAX_LIMIT = 100_000
__all__ = [
    "MAX_CURSOR",
    "MAX_LIMIT",
    "MAX_PAGE_ROWS",
    "MAX_RANK",
    "MAX_TAIL_LINES",
    "PAGE_BYTES",
    "PAGE_ROWS",
    "check_job_id",
    "parse_int",
]


def parse_int(name: str, raw: str, maximum: int, minimum: int = 0) -> int:
    """``raw`` as an integer from ``minimum`` to ``maximum`` (digits only: no sign, space or
    exponent)."""
    if (
        not (raw.isascii() and raw.isdigit())
        or len(raw) > len(str(maximum))
        or not minimum <= int(raw) <= maximum
    ):
        raise RequestError(
            f"{name} must be a whole number from {minimum} to {maximum}, got {short(raw)}"
        )
    return int(raw)


def check_job_id(job_id: str) -> str:
    """``job_id`` if it can name a job (a DNS-1123 label); else the job is not found."""
    if not is_dns1123_label(job_id) or job_id.endswith("\n"):  # the label regex's "$" allows one
        raise JobNotFound(f"no job {short(job_id)}")
    return job_id
