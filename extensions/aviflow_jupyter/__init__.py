"""The Jupyter server extension behind the Aviflow sidebar (extensions/README.md).

It serves ``/aviflow/...`` from the same backend as the magic, writes a first login's example
notebook, and ships the prebuilt JupyterLab extension ``aviflow-jupyterlab``
(``labextension/``, built by ``make labextension``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

LABEXTENSION = "aviflow-jupyterlab"


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "aviflow_jupyter"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": LABEXTENSION}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from jupyter_core.paths import jupyter_data_dir

    from aviflow_jupyter.handlers import routes
    from aviflow_jupyter.reads import JobReads
    from aviflow_jupyter.welcome import write_example

    reads = JobReads()
    web_app = serverapp.web_app
    web_app.add_handlers(".*$", routes(web_app.settings["base_url"], reads))
    write_example(Path(serverapp.root_dir), Path(jupyter_data_dir()))
    serverapp.log.info("aviflow: sidebar API at %saviflow/", web_app.settings["base_url"])
