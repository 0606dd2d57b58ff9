"""Which notebook and cell launched a job: recorded in the job's meta.json as ``origin``.

The notebook path comes from the kernel (``__session__``, set by ipykernel from the
server's ``JPY_SESSION_NAME``; VS Code's ``__vsc_ipynb_file__``); the cell id from the
``pre_run_cell`` event (JupyterLab and Notebook 7 send it with each execution).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from aviflow_magics._build import cell_hash


def notebook_path(namespace: Mapping[str, Any]) -> str | None:
    for key in ("__session__", "__vsc_ipynb_file__"):
        value = namespace.get(key)
        if isinstance(value, str) and value.endswith(".ipynb"):
            return value
    env = os.environ.get("JPY_SESSION_NAME")
    return env if env and env.endswith(".ipynb") else None


def default_name(path: str | None) -> str | None:
    """A run name from the notebook's file name (``train-bert.ipynb`` -> ``train-bert``)."""
    if not path:
        return None
    stem = PurePath(path).stem.strip()
    return stem if stem and "/" not in stem and "\\" not in stem else None


def make_origin(
    source: str,
    namespace: Mapping[str, Any],
    cell_id: str | None,
    execution_count: int | None,
) -> dict[str, Any]:
    return {
        "kind": "notebook-cell",
        "notebook": notebook_path(namespace),
        "cell_id": cell_id,
        "execution_count": execution_count,
        "cell_hash": cell_hash(source),
    }
