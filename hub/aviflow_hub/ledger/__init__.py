"""The usage ledger: one row per job attempt, fed from the run store's event logs.

- :mod:`.attempts` derives attempt records from events (pure)
- :mod:`.store` keeps them in SQLite or PostgreSQL (SQLAlchemy 2), idempotently
- :mod:`.reports` and :mod:`.html` build reports (pure); :mod:`.metrics` exports Prometheus metrics
"""

from aviflow_hub.ledger.attempts import AttemptRecord, JobInfo, attempts_from_events
from aviflow_hub.ledger.reports import usage_report
from aviflow_hub.ledger.store import Ledger

__all__ = ["AttemptRecord", "JobInfo", "Ledger", "attempts_from_events", "usage_report"]
