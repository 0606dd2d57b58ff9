"""aviflow-api that is killed (SIGKILL, by itself) in the middle of an ingest batch.

A fault-injecting wrapper for ``test_api_faults.py``, run as
``python aviflow_dying_ingest.py --config FILE`` in place of ``python -m
aviflow_hub.service``: the same service, except that the ledger's ingest dies inside the
transaction of the second job of a poll: the first job's change is committed, the second's
job row is written but not committed, the rest of the poll not even read into the ledger. A
service that starts over reads every unfinished job from its first event in its first poll,
so its first poll is such a batch whenever two jobs are unfinished.

It says ``dying mid-batch after N changes`` on stderr before it kills itself.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from aviflow_hub.ledger.models import AttemptRow
from aviflow_hub.ledger.store import Ledger
from aviflow_hub.service.app import main

_real_apply = Ledger._apply
_real_upsert = Ledger._upsert
_applied = [0]


def _apply(self: Ledger, change: Any, now: float) -> None:
    _applied[0] += 1
    _real_apply(self, change, now)


def _upsert(self: Ledger, session: Any, model: Any, rows: Any, keys: Any) -> None:
    if model is AttemptRow and _applied[0] == 2:
        session.flush()  # the job row is in the open transaction
        print(f"dying mid-batch after {_applied[0]} changes", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    _real_upsert(self, session, model, rows, keys)


Ledger._apply = _apply  # type: ignore[method-assign]
Ledger._upsert = _upsert  # type: ignore[method-assign]

if __name__ == "__main__":
    main()
