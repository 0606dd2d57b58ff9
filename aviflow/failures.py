"""Which rank failed first, when one failure makes the others fail too.

In synchronous training one rank dying (an exception, a signal, OOM) makes its peers fail
in their next collective ("Connection closed by peer", NCCL/gloo timeouts). Those are
consequences. The root cause is, in order of preference: the earliest failure record that
is not a communication error; else a rank killed by a signal (from torchrun's "Root Cause"
report in a node's launcher log); else the earliest failure record of any kind.
"""

from __future__ import annotations

import re
from typing import Any

_COMM_TYPES = {"DistBackendError", "DistNetworkError", "DistStoreError", "DistError"}
_COMM_TEXT = re.compile(
    r"gloo|nccl|connection (closed|reset) by peer|broken pipe|socket timeout|timed out|"
    r"processgroup|collective operation timeout|watchdog",
    re.IGNORECASE,
)
_ROOT_CAUSE = re.compile(
    r"Root Cause \(first observed failure\):\s*\[\d+\]:\s*"
    r"time\s*:\s*(?P<time>\S+)\s*host\s*:\s*\S+\s*"
    r"rank\s*:\s*(?P<rank>\d+) \(local_rank: \d+\)\s*"
    r"exitcode\s*:\s*(?P<code>-?\d+)",
)


def is_communication_error(record: dict[str, Any]) -> bool:
    return record.get("exception") in _COMM_TYPES or bool(
        _COMM_TEXT.search(record.get("message", ""))
    )


def launcher_root_causes(log_text: str) -> list[dict[str, int]]:
    """``{"rank", "exit_code"}`` for each "Root Cause" block torchrun printed in a node log."""
    return [
        {"rank": int(m["rank"]), "exit_code": int(m["code"])}
        for m in _ROOT_CAUSE.finditer(log_text)
    ]


def first_failure(
    records: list[dict[str, Any]], root_causes: list[dict[str, int]]
) -> dict[str, Any] | None:
    """The root-cause failure among ``records`` (earliest first) and launcher reports."""
    for record in records:
        if not is_communication_error(record):
            return record
    recorded = {r["rank"] for r in records}
    for cause in root_causes:
        if cause["exit_code"] < 0 and cause["rank"] not in recorded:
            signum = -cause["exit_code"]
            return {
                "rank": cause["rank"],
                "exception": "Signal",
                "message": f"rank {cause['rank']} was killed by signal {signum}",
                "traceback": "",
                "exit_code": cause["exit_code"],
            }
    return records[0] if records else None
