"""A real Jupyter server for the tests: :func:`start_jupyter`.

It listens on loopback on a free port with token auth, with its home (root directory),
data, config, runtime, settings and workspace directories under one temp dir. JupyterLab
and Notebook 7 get their own settings without the "Jupyter news?" prompt (and no fetch of
the news feed). Used by the server extension's tests and by the notebook's browser test.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from aviflow._ports import free_port

TOKEN = "jupyter-test-token"
FRONTENDS = {"jupyterlab": "LabApp", "notebook": "JupyterNotebookApp"}  # app -> its config
_OWN: Any = object()  # a request's default token: the server's own


@dataclass
class Server:
    url: str  # ends in /
    root_dir: Path
    data_dir: Path
    log: Path
    proc: subprocess.Popen[bytes]
    token: str

    def request(
        self, method: str, path: str, *, token: str | None = _OWN, **kw: Any
    ) -> requests.Response:
        """``path`` relative to the server's URL, with the server's token, ``token`` or
        (None) without a login."""
        token = self.token if token is _OWN else token
        headers = {"Authorization": f"token {token}"} if token else {}
        return requests.request(method, self.url + path, headers=headers, timeout=30, **kw)

    def get(self, path: str, **kw: Any) -> Any:
        resp = self.request("GET", path, **kw)
        assert resp.status_code == 200, (resp.status_code, resp.text)
        return resp.json()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL to its process group after 30 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def start_jupyter(
    base: Path,
    app: str = "jupyter_server",
    *,
    env: Mapping[str, str],
    token: str = TOKEN,
    argv: Sequence[str] = (),
    server_config: Sequence[Path] = (),
    timeout: float = 180,
) -> Server:
    """Start ``python -m <app>`` (``jupyter_server``, ``jupyterlab`` or ``notebook``) with its
    directories under ``base`` (``home/``, ``data/``, ``config/``, ...; kept when it exists,
    so a second start is the same user's next start), ``env`` plus the Jupyter directory
    variables, ``argv`` appended and the ``server_config`` files in its config directory's
    ``jupyter_server_config.d``; return once ``api/status`` answers."""
    dirs = {d: base / d for d in ("home", "data", "config", "runtime")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    for file in server_config:
        (dirs["config"] / "jupyter_server_config.d").mkdir(exist_ok=True)
        shutil.copy(file, dirs["config"] / "jupyter_server_config.d")
    port = free_port()
    args = [
        sys.executable,
        "-m",
        app,
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={dirs['home']}",
        f"--IdentityProvider.token={token}",
        *(["--allow-root"] if os.geteuid() == 0 else []),
    ]
    frontend = FRONTENDS.get(app)
    if frontend:
        settings = base / "settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True, exist_ok=True)
        (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
        args += [
            f"--{frontend}.user_settings_dir={base / 'settings'}",
            f"--{frontend}.workspaces_dir={base / 'workspaces'}",
        ]
    args += argv
    full_env = {
        **env,
        "JUPYTER_DATA_DIR": str(dirs["data"]),
        "JUPYTER_CONFIG_DIR": str(dirs["config"]),
        "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
    }
    log = base / "server.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            args,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=dirs["home"],
            start_new_session=True,
        )
    server = Server(f"http://127.0.0.1:{port}/", dirs["home"], dirs["data"], log, proc, token)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if server.request("GET", "api/status").status_code == 200:
                return server
        except requests.RequestException:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"{app} did not start: {log.read_text()[-4000:]}")
        time.sleep(0.3)
