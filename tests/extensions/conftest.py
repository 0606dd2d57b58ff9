"""Fixtures for the sidebar's server extension (extensions/aviflow_jupyter).

``jupyter_server``
    ``jupyter_server(name, app="jupyter_server", **env)`` starts a real Jupyter server
    (``app``: ``jupyter_server``, ``jupyterlab`` or ``notebook``) on a free port with the
    extension enabled by the config file the package installs, its directories under
    ``<tmp>/<name>`` and the test's ``AVIFLOW_ROOT``; ``env`` adds variables (e.g. a hub's),
    a hub's own are removed from the test's environment first. Returns a
    :class:`aviflow_jupyter_server.Server`; every server is stopped after the test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aviflow_jupyter_server import Server, start_jupyter

from aviflow.backends import BACKEND_ENV
from aviflow.backends.hub import API_URL_ENV, TOKEN_ENV, USER_ENV
from aviflow.store import ROOT_ENV

ENABLE = Path(__file__).parents[2] / "extensions/aviflow_jupyter/config/aviflow_jupyter.json"
HUB_ENV = (TOKEN_ENV, USER_ENV, API_URL_ENV, BACKEND_ENV)


@pytest.fixture
def jupyter_server(run_root: Path, tmp_path: Path) -> Iterator[Any]:
    started: list[Server] = []

    def start(name: str = "server", app: str = "jupyter_server", **extra_env: str) -> Server:
        env = {k: v for k, v in os.environ.items() if k not in HUB_ENV}
        env[ROOT_ENV] = str(run_root)
        # enabled by the same file the package installs
        server = start_jupyter(
            tmp_path / name, app, env={**env, **extra_env}, server_config=[ENABLE]
        )
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
