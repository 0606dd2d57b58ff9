"""A first login's example notebook: written into the server's root directory once, the first
time this extension starts for the user (a marker in the user's Jupyter data directory
remembers it, so a deleted or renamed example never comes back)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from aviflow.examples.notebook import EXAMPLE_NAME, example_notebook

MARKER = "aviflow-example-written"
log = logging.getLogger("aviflow_jupyter")


def write_example(root_dir: Path, data_dir: Path) -> Path | None:
    """Write the example into ``root_dir`` unless this user had it before; its path, or None."""
    marker = data_dir / MARKER
    if marker.exists():
        return None
    target = root_dir / EXAMPLE_NAME
    try:
        if not target.exists():
            target.write_text(json.dumps(example_notebook(), indent=1) + "\n", encoding="utf-8")
        data_dir.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{target}\n", encoding="utf-8")
    except OSError as exc:  # a read-only home must not stop the server
        log.warning("aviflow: could not write the example notebook %s: %s", target, exc)
        return None
    return target
