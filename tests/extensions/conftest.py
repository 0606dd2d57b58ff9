"""Fixtures for the sidebar's server extension (extensions/aviflow_jupyter).

``jupyter_server``
    ``jupyter_server(name, app="jupyter_server", **env)`` starts a real Jupyter server
    (``app``: ``jupyter_server``, ``jupyterlab`` or ``notebook``) on a free port with the
    extension enabled by the config file the package installs, its root directory, data and config directories in a temp dir, and
    the test's ``AVIFLOW_ROOT``; ``env`` adds variables (e.g. a hub's). Returns a
    :class:`Server`; every server is stopped after the test.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from aviflow._ports import free_port
from aviflow.backends import BACKEND_ENV
from aviflow.backends.hub import API_URL_ENV, TOKEN_ENV, USER_ENV
from aviflow.store import ROOT_ENV

TOKEN = "sidebar-test-token"
ENABLE = Path(__file__).parents[2] / "extensions/aviflow_jupyter/config/aviflow_jupyter.json"
FRONTENDS = {"jupyterlab": "LabApp", "notebook": "JupyterNotebookApp"}  # app -> its config
HUB_ENV = (TOKEN_ENV, USER_ENV, API_URL_ENV, BACKEND_ENV)


@dataclass
class Server:
    url: str  # ends in /
    root_dir: Path
    data_dir: Path
    log: Path
    proc: subprocess.Popen[bytes]

    def request(
        self, method: str, path: str, *, token: str | None = TOKEN, **kw: Any
    ) -> requests.Response:
        headers = {"Authorization": f"token {token}"} if token else {}
        return requests.request(method, self.url + path, headers=headers, timeout=30, **kw)

    def get(self, path: str, **kw: Any) -> Any:
        resp = self.request("GET", path, **kw)
        assert resp.status_code == 200, (resp.status_code, resp.text)
        return resp.json()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def jupyter_server(run_root: Path, tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str = "server", app: str = "jupyter_server", **extra_env: str) -> Server:
        base = tmp_path / name
        root_dir, data_dir, config_dir, runtime = (
            base / "home",
            base / "data",
            base / "config",
            base / "runtime",
        )
        for d in (root_dir, data_dir, config_dir / "jupyter_server_config.d", runtime):
            d.mkdir(parents=True, exist_ok=True)
        # enabled by the same file the package installs
        shutil.copy(ENABLE, config_dir / "jupyter_server_config.d")
        env = {k: v for k, v in os.environ.items() if k not in HUB_ENV}
        env[ROOT_ENV] = str(run_root)
        env.update(
            JUPYTER_DATA_DIR=str(data_dir),
            JUPYTER_CONFIG_DIR=str(config_dir),
            JUPYTER_RUNTIME_DIR=str(runtime),
            **extra_env,
        )
        port = free_port()
        log = base / "server.log"
        argv = [
            sys.executable,
            "-m",
            app,
            "--no-browser",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--ServerApp.root_dir={root_dir}",
            f"--IdentityProvider.token={TOKEN}",
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ]
        frontend = FRONTENDS.get(app)
        if frontend:  # its own settings (no "Jupyter news?" prompt) and workspaces
            settings = base / "settings" / "@jupyterlab" / "apputils-extension"
            settings.mkdir(parents=True, exist_ok=True)
            (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
            argv += [
                f"--{frontend}.user_settings_dir={base / 'settings'}",
                f"--{frontend}.workspaces_dir={base / 'workspaces'}",
            ]
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        started.append(proc)
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()[-4000:]
            try:
                if (
                    requests.get(
                        url + "api/status", timeout=5, headers={"Authorization": f"token {TOKEN}"}
                    ).status_code
                    == 200
                ):
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.3)
        return Server(url, root_dir, data_dir, log, proc)

    yield start
    for proc in started:
        _stop(proc)
