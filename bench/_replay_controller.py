"""The controller for ``bench/replay.py``: ``bench/_counted_controller.py`` (the controller's
own ``main`` with counters, as ``bench/controller_history.py`` runs it) with its forecast's
periods compressed like the replayed trace: queued jobs are re-estimated every
``$BENCH_QUEUED_TICK`` seconds (5 by default), the ClusterQueues read at most that long ago
(10 by default) and the pool's recent runs' shares of their time limits counted again as
often (60 s by default, :data:`aviflow.history.RECHECK`, ten trace hours at the replay's
default compression). Nothing else of the controller changes.

    BENCH_QUEUED_TICK=1 BENCH_COUNTS=c.json python bench/_replay_controller.py --settings s.yaml
"""

from __future__ import annotations

import os
import sys
from typing import Any


def main() -> int:
    import _counted_controller

    from aviflow import history
    from aviflow.operator import _forecast
    from aviflow.operator._controller import Controller

    tick = float(os.environ.get("BENCH_QUEUED_TICK", "1"))
    _forecast.CQ_TTL = tick
    history.RECHECK = tick
    init = Controller.__init__

    def compressed(self: Controller, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("queued_tick", tick)
        init(self, *args, **kwargs)

    Controller.__init__ = compressed  # type: ignore[method-assign]
    return _counted_controller.main()


if __name__ == "__main__":
    sys.exit(main())
