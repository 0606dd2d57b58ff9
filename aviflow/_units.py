"""Durations (``4h``, ``1h30m``), Kubernetes resource quantities (``64Gi``, ``500m``) and the
Unix times a file may hold."""

from __future__ import annotations

import re

_DURATION_PART = re.compile(r"(\d+)(d|h|m|s)")
DURATION = re.compile(r"^(\d+(d|h|m|s))+$")
_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}

# 9999-12-31, a minute before :func:`datetime.fromtimestamp` ends: a later time cannot be shown
LAST_TIME = 253402300000.0

_QUANTITY = re.compile(r"^(\d+(\.\d+)?)(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")
_FACTOR = {
    None: 1,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}


def parse_duration(text: str) -> int:
    """Seconds in a duration such as ``90s``, ``30m``, ``4h``, ``1h30m`` or ``2d``."""
    if not isinstance(text, str) or not DURATION.fullmatch(text):
        raise ValueError(f"{text!r} is not a duration; use e.g. '90s', '30m', '4h' or '1h30m'")
    return sum(int(n) * _SECONDS[u] for n, u in _DURATION_PART.findall(text))


def format_duration(seconds: float) -> str:
    seconds = round(seconds)
    parts = []
    for unit in ("d", "h", "m", "s"):
        n, seconds = divmod(seconds, _SECONDS[unit])
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts) or "0s"


def parse_quantity(text: str | int | float) -> float:
    """The value of a Kubernetes quantity (``2``, ``500m``, ``64Gi``) as a number."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a quantity")
    if isinstance(text, int | float):
        return float(text)
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a quantity; use e.g. '16', '500m', '64Gi'")
    return float(match.group(1)) * _FACTOR[match.group(3)]


def parse_bytes(value: str | int) -> int:
    """Whole bytes in a byte count or a quantity (``8Gi``, ``500M``, ``1048576``).

    >>> parse_bytes("8Gi"), parse_bytes("1.5Ki"), parse_bytes(4096)
    (8589934592, 1536, 4096)
    """
    if isinstance(value, str) and value.endswith("m"):
        raise ValueError(f"{value!r} is not a number of bytes; use e.g. '8Gi', '500Mi', '1048576'")
    try:
        number = parse_quantity(value)
    except ValueError:
        raise ValueError(
            f"{value!r} is not a number of bytes; use e.g. '8Gi', '500Mi', '1048576'"
        ) from None
    if number < 0 or number != int(number):
        raise ValueError(f"{value!r} is not a whole number of bytes")
    return int(number)


def is_unix_time(value: object) -> bool:
    """Whether ``value`` is Unix seconds a date can show (0 up to :data:`LAST_TIME`), as a
    time read from a file must be before it is used: not a bool, a string, NaN or 1e300.

    >>> [is_unix_time(v) for v in (0, 1.7e9, -1, 1e300, float("nan"), True, "1")]
    [True, True, False, False, False, False, False]
    """
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= LAST_TIME
    )
