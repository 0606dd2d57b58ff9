"""A node's log cap: each of its ranks' logs stays within the rank's share of the job's cap.

A rank cannot do it itself (one that ``--exec``s a command keeps no thread of ours), so the
node's launcher, which outlives its ranks, runs a :class:`LogCap` thread: about once a second
it rotates each local rank's log that is past half its share (:meth:`RunDir.cap_rank_log`,
see :mod:`aviflow.store._logs`), and :meth:`LogCap.finish` does it once more when the ranks
have ended. The node's own log (``accelerate launch``'s output, where a crashing rank's
traceback is also printed, once per restart) is held within one rank's share the same way. Nothing a job leaves in its directory can make it fail the launcher: a log it
cannot cap (a symlink, a FIFO, a ``.1`` that is a directory) is named once on the node's
output and left as it is.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from aviflow.runtime.env import RuntimeEnv
from aviflow.store import RunDir

CHECK_SECONDS = 1.0


class LogCap(threading.Thread):
    """Rotates the logs of ``ranks`` at ``share`` bytes each (log and ``.1`` together)."""

    def __init__(
        self,
        run: RunDir,
        ranks: Iterable[int],
        share: int,
        every: float = CHECK_SECONDS,
        *,
        node: int | None = None,
    ) -> None:
        super().__init__(name="aviflow-logcap", daemon=True)
        self.rundir, self.ranks, self.share, self.every = run, list(ranks), share, every
        self.node = node  # the node whose own log is capped too (None: only the ranks')
        self.done = threading.Event()
        self.told: set[str] = set()  # the logs that could not be capped (said once)

    def check(self, *, final: bool = False) -> None:
        """One pass over the logs (``final``: their ranks have ended)."""
        for rank in self.ranks:
            try:
                self.rundir.cap_rank_log(rank, self.share, final=final)
            except Exception as exc:  # whatever the job left there, the launcher carries on
                self._tell(f"rank {rank}'s log", exc)
        if self.node is not None:
            try:
                self.rundir.cap_node_log(self.node, self.share, final=final)
            except Exception as exc:
                self._tell(f"node {self.node}'s log", exc)

    def run(self) -> None:
        for rank in self.ranks:  # copies a rotation killed with the last attempt left
            self.rundir.remove_rotation_leftovers(rank)
        if self.node is not None:
            self.rundir.remove_rotation_leftovers(node=self.node)
        while not self.done.wait(self.every):
            self.check()

    def finish(self) -> None:
        """Stop checking, then rotate once more (the ranks have ended)."""
        self.done.set()
        if self.is_alive():
            self.join()
        self.check(final=True)

    def _tell(self, what: str, exc: Exception) -> None:
        if what in self.told:
            return
        self.told.add(what)
        try:
            print(f"aviflow: {what} is not capped: {str(exc)[:300]}", flush=True)
        except (OSError, ValueError):
            pass  # the node's output is gone: nothing to tell it


def start(run: RunDir, node: RuntimeEnv, ranks: Iterable[int]) -> LogCap | None:
    """Cap the logs of this node's ``ranks``, and its own, if the job has a log cap."""
    if node.rank_log_bytes is None:
        return None
    cap = LogCap(run, ranks, node.rank_log_bytes, node=node.node_rank)
    cap.start()
    return cap
