"""Aviflow in the notebook: the ``%%aviflow_train`` magic and the live job panel.

::

    %load_ext aviflow

    %%aviflow_train --nodes 2 --gpus-per-node 8 --queue research --out job
    accelerator = Accelerator(log_with=aviflow.tracker())
    ...

    %aviflow_jobs                      # my jobs
    %aviflow_attach tiny-3f9a1c2b      # a live panel on any job, also after a restart

``%%aviflow_train?`` lists every option. Loading the extension imports neither torch nor
ipywidgets; the panel's modules load when a job is first displayed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_ipython_extension", "unload_ipython_extension"]

_loaded: dict[int, Any] = {}


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics on ``ipython`` (``%load_ext aviflow`` or ``aviflow_magics``)."""
    from aviflow_magics._magics import AviflowMagics

    if id(ipython) in _loaded:
        return
    magics = AviflowMagics(ipython)
    ipython.register_magics(magics)
    ipython.events.register("pre_run_cell", magics.pre_run_cell)
    _loaded[id(ipython)] = magics


def unload_ipython_extension(ipython: Any) -> None:
    """Stop the panels' background updates and unregister the cell hook."""
    magics = _loaded.pop(id(ipython), None)
    if magics is not None:
        ipython.events.unregister("pre_run_cell", magics.pre_run_cell)
    import sys

    poller = sys.modules.get("aviflow_magics._poller")
    if poller is not None:
        poller.stop_all()
