"""The usage ledger: one row per job and one per job attempt, fed by the backend's change feed.

- :mod:`aviflow.attempts` (core) derives attempt records from events, incrementally (pure)
- :mod:`.store` keeps jobs and attempts in SQLite or PostgreSQL (SQLAlchemy 2), idempotently;
  :mod:`.migrate` brings a database of an earlier version up to date
- :mod:`.reports` and :mod:`.html` build reports (pure); :mod:`.metrics` exports Prometheus metrics
"""

from aviflow_hub.ledger.reports import usage_report
from aviflow_hub.ledger.store import Ledger

__all__ = ["Ledger", "usage_report"]
