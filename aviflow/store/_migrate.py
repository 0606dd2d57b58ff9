"""Moving a store of an earlier layout into this one: an explicit step, never a read's.

Before the per-user layout, a job's directory was ``<root>/<job-id>/``. :func:`migrate`
moves each *finished* job of that flat layout under its user's directory and into the index
(a job that has not finished stays where its supervisor works). It runs when asked
(``aviflow store migrate``) and at the start-up of each process that writes a store: the
local backend when it is made, aviflow-api (:meth:`Backend.start
<aviflow.backends.base.Backend.start>`) and the controller. Reads never write: before the
migration a read that meets such a job says which command moves it
(:class:`~aviflow.errors.StoreNeedsMigration`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aviflow._units import is_unix_time
from aviflow.errors import StoreNeedsMigration
from aviflow.names import is_dns1123_label
from aviflow.store._files import append_line, atomic_write, is_file
from aviflow.store._rundir import RunDir

if TYPE_CHECKING:
    from aviflow.store._runstore import RunStore

MIGRATE_COMMAND = "aviflow store migrate"


def flat_job(path: Path) -> tuple[float, RunDir, dict[str, Any]] | None:
    """``(submitted, run, meta)`` if ``path`` (a directory right under a store's root) is a
    finished job of the flat layout, which :func:`migrate` moves; else None. Reads only."""
    old = RunDir(path)
    if not is_file(old.spec_path, old.path) or not old.status().state.is_finished():
        return None
    data = old.read_json(old.meta_path, {})
    if not isinstance(data, dict):
        return None
    return _seconds(data.get("submitted")), old, data


def _seconds(value: object) -> float:
    """A legacy ``submitted`` time, or 0 where it is not a finite number of seconds (a job of
    an earlier version could write its own meta file: it may hold anything)."""
    return float(value) if is_unix_time(value) else 0.0  # type: ignore[arg-type]


def flat_jobs(root: Path) -> list[tuple[float, RunDir, dict[str, Any]]]:
    """Every finished job of the flat layout under ``root``, oldest submission first."""
    try:
        entries = [e for e in os.scandir(root) if is_dns1123_label(e.name) and e.is_dir()]
    except OSError:
        return []
    found = [job for e in entries if (job := flat_job(Path(e.path))) is not None]
    return sorted(found, key=lambda t: (t[0], t[1].id))


def needs_migration(root: Path, ids: list[str]) -> StoreNeedsMigration:
    """The error a read raises when it meets jobs ``ids`` of the flat layout in ``root``."""
    shown = ", ".join(sorted(ids)[:3]) + (", ..." if len(ids) > 3 else "")
    jobs = f"job {shown} is" if len(ids) == 1 else f"{len(ids)} jobs ({shown}) are"
    return StoreNeedsMigration(
        f"{jobs} in the layout of an earlier Aviflow version (<root>/<job-id>/ in {root}); "
        f"`{MIGRATE_COMMAND} --root {root}` moves them in (the local backend, aviflow-api "
        "and the controller also do when they start)"
    )


def migrate(store: RunStore) -> list[str]:
    """Move the finished jobs of the flat layout under their user's directory, into the
    index, oldest first; the ids moved. Running it again moves nothing more; two processes
    running it at once move each job once (the one that links its id moves it)."""
    moved = []
    for submitted, old, data in flat_jobs(store.root):
        user = data.get("user")
        user = user if isinstance(user, str) and user else "unknown"
        home = store.user_dir(user)
        home.mkdir(exist_ok=True)
        store.index_dir.mkdir(exist_ok=True)
        try:
            os.symlink(f"../{home.name}/{old.id}", store.index_dir / old.id)
        except FileExistsError:
            continue
        meta = {  # what the job's own meta held, with the owner and time as read here
            **data,
            "user": user,
            "submitted": submitted,
            "id": old.id,
            "codeHash": data.get("codeHash", data.get("code_hash", "")),
        }
        atomic_write(old.meta_path, json.dumps(meta, indent=2))
        os.rename(old.path, home / old.id)
        append_line(store.index_log, {"id": old.id, "user": home.name, "time": submitted})
        moved.append(old.id)
    return moved
