"""Which rank failed first, when one failure makes the others fail too. Pure.

In synchronous training one rank dying (an exception, a signal, OOM) makes its peers fail
in their next collective ("Connection closed by peer", NCCL/gloo timeouts). Those are
consequences. The root cause is, in order of preference: the earliest failure record that
is not a communication error; else a rank killed by a signal (from torchrun's "Root Cause"
report in a node's launcher log); else the earliest failure record of any kind; else the
first node that exited non-zero, with the end of its output.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from aviflow.records import FailureInfo

LOG_TAIL_CHARS = 4000
_ROOT_CAUSE = re.compile(
    r"Root Cause \(first observed failure\):\s*\[\d+\]:\s*"
    r"time\s*:\s*(?P<time>\S+)\s*host\s*:\s*\S+\s*"
    r"rank\s*:\s*(?P<rank>\d+) \(local_rank: \d+\)\s*"
    r"exitcode\s*:\s*(?P<code>-?\d+)",
)


def launcher_root_causes(log_text: str) -> list[tuple[int, int]]:
    """``(rank, exit code)`` for each "Root Cause" block torchrun printed in a node log."""
    return [(int(m["rank"]), int(m["code"])) for m in _ROOT_CAUSE.finditer(log_text)]


def first_failure(
    records: Sequence[FailureInfo], root_causes: Sequence[tuple[int, int]]
) -> FailureInfo | None:
    """The root-cause failure among ``records`` (earliest first) and launcher reports."""
    for record in records:
        if not record.is_communication_error():
            return record
    recorded = {r.rank for r in records}
    for rank, code in root_causes:
        if code < 0 and rank not in recorded:
            return FailureInfo(
                rank=rank,
                exception="Signal",
                message=f"rank {rank} was killed by signal {-code}",
                exit_code=code,
            )
    return records[0] if records else None


def attribute(
    records: Sequence[FailureInfo],
    node_logs: Mapping[int, str],
    exit_codes: Mapping[int, int | None],
    gpus_per_node: int,
    rank_log_tail: Mapping[int, str] | None = None,
) -> FailureInfo:
    """The failure of an attempt whose group was stopped because something failed.

    ``records``: the attempt's rank failure records, earliest first; ``node_logs``: the end
    of each node's launcher log; ``exit_codes``: each node's exit code (None: still running
    when the group was stopped); ``rank_log_tail``: the end of ranks' logs, for a rank
    without a traceback.
    """
    causes = [c for n in sorted(node_logs) for c in launcher_root_causes(node_logs[n])]
    first = first_failure(records, causes)
    if first is not None:
        node = first.node if first.node is not None else (first.rank or 0) // gpus_per_node
        tail = ""
        if not first.traceback and first.rank is not None:
            tail = (rank_log_tail or {}).get(first.rank, "")[-LOG_TAIL_CHARS:]
        return FailureInfo(
            rank=first.rank,
            node=node,
            attempt=first.attempt,
            exception=first.exception,
            message=first.message,
            traceback=first.traceback,
            exit_code=first.exit_code,
            log_tail=tail,
            time=first.time,
        )
    failed = [n for n, c in sorted(exit_codes.items()) if c not in (None, 0)]
    if failed:
        node = failed[0]
        return FailureInfo(
            node=node,
            exit_code=exit_codes[node],
            log_tail=node_logs.get(node, "")[-LOG_TAIL_CHARS:],
        )
    return FailureInfo(message="the attempt failed without a failure record or exit code")
