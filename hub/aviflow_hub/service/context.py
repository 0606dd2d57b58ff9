"""What every aviflow-api handler shares: config, backend, ledger, hub auth, a thread pool.

Backend and ledger calls block (files, SQL, process control), so handlers run them in the
pool with :meth:`ServiceContext.run`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import quote

from jupyterhub.services.auth import HubOAuth
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from aviflow.backends import Backend, backend_class
from aviflow_hub.config import HubConfig
from aviflow_hub.ledger.store import Ledger

T = TypeVar("T")
USER_CACHE_SECONDS = 5.0


def make_backend(cfg: HubConfig) -> Backend:
    """``api.backend`` built from its section (``api.<name>``). The local backend also gets
    the run root and the teams' quotas, which then hold across concurrent jobs (Kueue's
    ClusterQueues do it on the cluster)."""
    settings = cfg.backend_settings()
    if cfg.api.backend == "local":
        settings["root"] = str(cfg.run_root())
        settings["quotas"] = {team.queue: team.gpu_quota for team in cfg.teams}
    return backend_class(cfg.api.backend).from_config(settings)


class ServiceContext:
    def __init__(
        self, cfg: HubConfig, backend: Backend, ledger: Ledger, hub_auth: HubOAuth
    ) -> None:
        self.cfg = cfg
        self.backend = backend
        self.ledger = ledger
        self.hub_auth = hub_auth
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="aviflow-api")
        self._users: dict[str, tuple[float, dict[str, Any]]] = {}

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def hub_user(self, name: str) -> dict[str, Any]:
        """The hub's model of ``name`` (groups, admin), read with the service's own token."""
        cached = self._users.get(name)
        if cached and time.monotonic() - cached[0] < USER_CACHE_SECONDS:
            return cached[1]
        url = f"{self.hub_auth.api_url.rstrip('/')}/users/{quote(name, safe='')}"
        resp = await AsyncHTTPClient().fetch(
            HTTPRequest(url, headers={"Authorization": f"token {self.hub_auth.api_token}"}),
            raise_error=True,
        )
        model = json.loads(resp.body)
        self._users[name] = (time.monotonic(), model)
        return model

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.ledger.close()
