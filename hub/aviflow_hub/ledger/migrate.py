"""Bring a ledger database an earlier version created up to the current tables.

Only additive changes, so no migration framework: a column the models declare but the table
lacks is added (nullable), an index it lacks is created, and on PostgreSQL a ``VARCHAR(n)``
column the models now declare ``Text`` is widened. Running it again finds nothing to do.

>>> from sqlalchemy import create_engine
>>> engine = create_engine("sqlite://")
>>> Base.metadata.create_all(engine)
>>> migrate(engine)
[]
"""

from __future__ import annotations

import logging

from sqlalchemy import String, Text, inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.schema import CreateIndex

from aviflow_hub.ledger.models import Base

log = logging.getLogger("aviflow_hub.ledger")


def pending(engine: Engine) -> list[str]:
    """The statements that would bring the existing tables up to the models."""
    found = inspect(engine)
    quote = engine.dialect.identifier_preparer.quote
    postgres = engine.dialect.name == "postgresql"
    out = []
    for table in Base.metadata.sorted_tables:
        if not found.has_table(table.name):
            continue  # create_all makes it whole
        existing = {c["name"]: c["type"] for c in found.get_columns(table.name)}
        for column in table.columns:
            name = f"{quote(table.name)}"
            have = existing.get(column.name)
            if have is None:
                kind = column.type.compile(dialect=engine.dialect)
                exists = "IF NOT EXISTS " if postgres else ""
                out.append(f"ALTER TABLE {name} ADD COLUMN {exists}{quote(column.name)} {kind}")
            elif (
                postgres
                and isinstance(column.type, Text)
                and isinstance(have, String)
                and getattr(have, "length", None) is not None
            ):
                out.append(f"ALTER TABLE {name} ALTER COLUMN {quote(column.name)} TYPE TEXT")
        indexed = {i["name"] for i in found.get_indexes(table.name)}
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            if index.name not in indexed:
                made = CreateIndex(index, if_not_exists=True).compile(dialect=engine.dialect)
                out.append(str(made).strip())
    return out


def migrate(engine: Engine) -> list[str]:
    """Run :func:`pending`'s statements, each in its own transaction; return them."""
    statements = pending(engine)
    for statement in statements:
        log.info("ledger migration: %s", statement)
        try:
            with engine.begin() as conn:
                conn.execute(text(statement))
        except Exception:
            # another service process may have run it first; fail only if still needed
            if statement in pending(engine):
                raise
    return statements
