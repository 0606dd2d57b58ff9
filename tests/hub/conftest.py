"""Fixtures for the hub tests.

``hub_config``
    ``hub_config(**section_overrides)`` -> a config dict for two teams on free ports.
``Hub``
    What the hub fixtures return: ``call(method, path, token)`` (aviflow-api), ``page(path,
    token)`` (its HTML pages), ``token(user)``, ``spawn``/``stop_server``, ``log()``, and
    ``until(check, what)``, which polls for what the ledger shows within a second or two.
``hub_factory``
    ``hub_factory(cfg=None, env=None, ignore_sigint=False)`` -> another real hub like
    ``real_hub`` (any config dict, extra environment; ``ignore_sigint``: started with SIGINT
    ignored, as ``cmd &`` in a non-interactive shell starts it), stopped after the test.
``module_hub_factory`` (module scope)
    The same, for module-scoped fixtures: its hubs are stopped after the module.
``real_hub`` (module scope)
    A real JupyterHub process (configurable-http-proxy, the shared-password authenticator,
    local notebooks, aviflow-api on the local backend, the idle culler) on free ports in a
    temp dir. Users: alice (team a), bob (team b), lead (admin of team a), root (hub admin).
    After the module every job is cancelled, the hub is stopped and no process may remain.
``run_in_kernel``
    ``run_in_kernel(base, token, code)`` -> ``(stdout, error)``: runs ``code`` in a fresh kernel
    of the single-user server at ``base`` (``<hub>/user/<name>/``) over its REST API and
    websocket channels (``websocket-client``, a jupyter_server dependency), then shuts it down.
``postgres_url`` (session scope)
    A throwaway PostgreSQL cluster (initdb + pg_ctl as the ``postgres`` user) on a free port.
``ledger_url`` (parametrized: ``sqlite``, ``postgresql``)
    A fresh ledger database: a SQLite file in the test's temp dir, or a new database on
    ``postgres_url``.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aviflow_kernel
import psutil
import pytest
import requests
import yaml

from aviflow_hub.local import hub_command
from aviflow_testcluster import free_port, free_ports, wait_for

PASSWORD = "aviflow-test-pw"
ADMIN_PASSWORD = "aviflow-test-admin-password-0123456789"


def base_config(**overrides: Any) -> dict[str, Any]:
    ports = free_ports(4)  # distinct: two free_port() calls can return the same port
    cfg: dict[str, Any] = {
        "hub": {
            "bind": "127.0.0.1",
            "port": ports[0],
            "hubPort": ports[1],
            "proxyApiPort": ports[2],
            "dataDir": "state",
            "spawner": "local",
            "admins": ["root"],
            "groups": {"a": ["alice"], "b": ["bob"], "a-admins": ["lead"]},
        },
        "auth": {"type": "dev", "dev": {"userPassword": PASSWORD, "adminPassword": ADMIN_PASSWORD}},
        "teams": [
            {
                "name": "team-a",
                "groups": ["a"],
                "adminGroups": ["a-admins"],
                "queue": "queue-a",
                "gpuQuota": 4,
            },
            {"name": "team-b", "groups": ["b"], "queue": "queue-b", "gpuQuota": 4},
        ],
        "profiles": [
            {
                "slug": "small",
                "displayName": "Small",
                "cpu": 1,
                "memory": "1Gi",
                "image": "aviflow/notebook:test",
                "nodeSelector": {"aviflow.dev/node-pool": "cpu"},
            }
        ],
        "culler": {"enabled": True, "timeout": 3600, "every": 60},
        "api": {
            "bind": "127.0.0.1",
            "port": ports[3],
            "backend": "local",
            "local": {"capacity": 1},
            "ingestEvery": 1.0,
        },
    }
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


def write_config(directory: Path, cfg: dict[str, Any]) -> Path:
    path = directory / "hub.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@dataclass
class Hub:
    url: str
    config_path: Path
    run_root: Path
    process: subprocess.Popen[bytes]
    log_path: Path
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def api(self) -> str:
        return f"{self.url}/services/aviflow-api/api/v1/"

    @staticmethod
    def xsrf_from(html: str) -> str:
        m = re.search(r'name="_xsrf" value="([^"]+)"', html)
        assert m, html[:2000]
        return m.group(1)

    def config(self) -> dict[str, Any]:
        return yaml.safe_load(self.config_path.read_text())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def token(self, user: str, password: str = PASSWORD, scopes: list[str] | None = None) -> str:
        body: dict[str, Any] = {"auth": {"username": user, "password": password}, "note": "test"}
        if scopes is not None:
            body["scopes"] = scopes
        r = requests.post(f"{self.url}/hub/api/users/{user}/tokens", json=body, timeout=60)
        assert r.status_code == 201, r.text
        return r.json()["token"]

    def server(self, user: str, token: str) -> dict[str, Any] | None:
        """The user's default server model from the hub API (None when it has none)."""
        r = requests.get(
            f"{self.url}/hub/api/users/{user}",
            headers={"Authorization": f"token {token}"},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        return r.json()["servers"].get("")

    def spawn(
        self, user: str, token: str, options: dict[str, Any] | None = None, timeout: float = 600
    ) -> dict[str, Any]:
        """Start the user's server through the hub API and wait until the hub says it is ready."""
        r = requests.post(
            f"{self.url}/hub/api/users/{user}/server",
            json=options or {},
            headers={"Authorization": f"token {token}"},
            timeout=timeout,
        )
        assert r.status_code in (201, 202), (r.status_code, r.text, self.log()[-6000:])
        deadline = time.monotonic() + timeout
        while True:
            server = self.server(user, token)
            assert server is not None, f"the spawn failed:\n{self.log()[-6000:]}"
            if server["ready"]:
                return server
            assert time.monotonic() < deadline, f"not ready in {timeout}s:\n{self.log()[-6000:]}"
            time.sleep(1)

    def stop_server(self, user: str, token: str, timeout: float = 300) -> None:
        """Stop the user's server through the hub API and wait until the hub has no server."""
        r = requests.delete(
            f"{self.url}/hub/api/users/{user}/server",
            headers={"Authorization": f"token {token}"},
            timeout=timeout,
        )
        assert r.status_code in (202, 204), (r.status_code, r.text)
        deadline = time.monotonic() + timeout
        while self.server(user, token) is not None:
            assert time.monotonic() < deadline, f"still stopping after {timeout}s"
            time.sleep(1)

    def call(self, method: str, path: str, token: str | None, **kw: Any) -> requests.Response:
        headers = {"Authorization": f"token {token}"} if token else {}
        headers.update(kw.pop("headers", {}))
        return requests.request(method, self.api + path, headers=headers, timeout=120, **kw)

    def page(self, path: str, token: str) -> requests.Response:
        """A page of the service (``""``: the job list, ``"report"``) with a token."""
        return requests.get(
            f"{self.url}/services/aviflow-api/{path}",
            timeout=120,
            headers={"Authorization": f"token {token}"},
        )

    @staticmethod
    def until(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
        """:func:`aviflow_testcluster.wait_for` with the hub tests' default timeout (the
        ledger follows the backend's change feed every ``api.ingestEvery`` second)."""
        return wait_for(check, timeout, what)


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the hub exited with {proc.returncode}:\n{log.read_text()[-5000:]}")
        try:
            if requests.get(url, timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer in {timeout}s:\n{log.read_text()[-5000:]}")


def stop_hub(proc: subprocess.Popen[bytes]) -> list[int]:
    """SIGTERM the hub (it stops proxy, services and notebooks); return pids that survived."""
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    _gone, alive = psutil.wait_procs(family, timeout=30)
    for p in alive:
        p.kill()
    return [p.pid for p in alive]


@contextmanager
def _sigint_ignored(ignore: bool) -> Iterator[None]:
    """SIGINT ignored in this process meanwhile, so a child started now inherits that."""
    if not ignore:
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


# Every hub start_hub() started in this process; a failing test gets the logs of the live ones.
_STARTED: list[Hub] = []
HUB_LOG_LINES = 80


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """When a test fails while hubs run, attach the tail of each live hub's log (the hub,
    the proxy and aviflow-api write there): a body that is not JSON, a 503 from the proxy
    or a service restart is explained there, and the log is deleted with the hub."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.failed:
        return
    _STARTED[:] = [hub for hub in _STARTED if hub.process.poll() is None]
    for hub in _STARTED:
        try:
            lines = hub.log_path.read_text(errors="replace").splitlines()[-HUB_LOG_LINES:]
        except OSError as e:
            lines = [repr(e)]
        report.sections.append((f"hub log {hub.url} (last lines)", "\n".join(lines)))


def start_hub(
    directory: Path,
    cfg: dict[str, Any],
    env: dict[str, str] | None = None,
    ignore_sigint: bool = False,
) -> Hub:
    assert shutil.which("configurable-http-proxy"), "run tools/sysdeps.sh"
    path = write_config(directory, cfg)
    argv, hub_env, cwd = hub_command(path, sys.executable)
    env = {**hub_env, **(env or {})}
    cwd.mkdir(parents=True, exist_ok=True)
    log_path = directory / "hub.log"
    with open(log_path, "wb") as log, _sigint_ignored(ignore_sigint):
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{cfg['hub']['port']}"
    hub = Hub(url=url, config_path=path, run_root=cwd / "runs", process=proc, log_path=log_path)
    _STARTED.append(hub)
    try:
        _wait_http(f"{url}/hub/api/", proc, log_path)
        _wait_http(hub.api + "openapi.json", proc, log_path)
    except BaseException:
        stop_hub(proc)
        raise
    return hub


@pytest.fixture(scope="session")
def hub_config() -> Any:
    """``hub_config(**section_overrides)`` -> a config dict for two teams on free ports."""
    return base_config


@pytest.fixture
def hub_factory() -> Iterator[Any]:
    """``hub_factory(cfg=None, env=None, ignore_sigint=False)`` -> a started :class:`Hub`
    (default config: :func:`base_config`; ``env`` is added to the hub's environment;
    ``ignore_sigint``: the hub starts with SIGINT ignored), each in its own temp dir; after the
    test all are stopped and no process may remain."""
    yield from _hubs()


@pytest.fixture(scope="module")
def module_hub_factory() -> Iterator[Any]:
    """``hub_factory`` for module-scoped fixtures: its hubs stop after the module."""
    yield from _hubs()


def _hubs() -> Iterator[Any]:
    started: list[tuple[Hub, Path]] = []

    def start(
        cfg: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        ignore_sigint: bool = False,
    ) -> Hub:
        directory = Path(tempfile.mkdtemp(prefix="aviflow-hub-"))
        hub = start_hub(directory, cfg or base_config(), env, ignore_sigint)
        started.append((hub, directory))
        return hub

    yield start
    survivors = []
    for hub, directory in started:
        survivors += stop_hub(hub.process)
        shutil.rmtree(directory, ignore_errors=True)
    assert not survivors, f"hub processes survived SIGTERM: {survivors}"


@pytest.fixture(scope="module")
def real_hub(stop_jobs: Callable[[Path], list[str]]) -> Iterator[Hub]:
    directory = Path(tempfile.mkdtemp(prefix="aviflow-hub-"))
    hub = start_hub(directory, base_config())
    try:
        yield hub
    finally:
        stray = stop_jobs(hub.run_root)
        survivors = stop_hub(hub.process)
        shutil.rmtree(directory, ignore_errors=True)
        assert not stray, f"jobs left processes behind: {stray}"
        assert not survivors, f"hub processes survived SIGTERM: {survivors}"


@pytest.fixture(scope="module")
def tokens(real_hub: Hub) -> dict[str, str]:
    """A hub token of each of ``real_hub``'s users: alice, bob, lead and root (hub admin)."""
    return {u: real_hub.token(u) for u in ("alice", "bob", "lead")} | {
        "root": real_hub.token("root", password=ADMIN_PASSWORD)
    }


# -- kernels of a single-user server ------------------------------------------------------------


@pytest.fixture
def run_in_kernel() -> Any:
    """``run_in_kernel(base, token, code)`` -> ``(stdout, error)`` (see the module docstring)."""
    return aviflow_kernel.run_in_kernel


# -- PostgreSQL -----------------------------------------------------------------------------------


def _pg_bin(name: str) -> str:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    assert found, f"PostgreSQL server binaries are missing; run tools/sysdeps.sh ({name})"
    return str(found[-1])


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    directory = Path(tempfile.mkdtemp(prefix="aviflow-pg-"))
    os.chmod(directory, 0o777)
    data, port = directory / "data", free_port()
    as_pg: list[str] = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run(
        [*as_pg, _pg_bin("initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *as_pg,
            _pg_bin("pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(directory / "pg.log"),
            "-o",
            f"-p {port} -k {directory} -c listen_addresses=127.0.0.1 -c fsync=off",
            "-w",
            "-t",
            "120",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_pg, _pg_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.sqlite'}"
        return
    import psycopg

    server = request.getfixturevalue("postgres_url")
    name = f"ledger_{secrets.token_hex(6)}"
    plain = server.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield server.rsplit("/", 1)[0] + f"/{name}"
