"""What every aviflow-api handler shares: config, backend, ledger, hub auth, and the lanes.

Backend and ledger calls block (files, SQL, process control, the Kubernetes API), so
handlers run them in threads, each kind in its own lane (:mod:`.lanes`):
``await ctx.lanes.ledger.run(fn, *args)`` for the database alone, ``ctx.lanes.reads`` for
the backend's reads, ``ctx.lanes.writes`` for submissions and cancels; the change feed has
``ctx.lanes.ingest``.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import quote

from jupyterhub.services.auth import HubOAuth
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from aviflow.backends import Backend, backend_class
from aviflow_hub.config import HubConfig
from aviflow_hub.ledger.store import Ledger
from aviflow_hub.service.lanes import Lanes
from aviflow_hub.service.queue_reports import QueueReports

USER_CACHE_SECONDS = 5.0


def make_backend(cfg: HubConfig) -> Backend:
    """``api.backend`` built from its section (``api.<name>``) with the run root and the
    teams' GPU quotas, which its class uses as it needs (``Backend.config_section``: the
    local backend keeps its store there and holds the quotas across concurrent jobs; the
    kubernetes backend finds the run store there and leaves the quotas to Kueue)."""
    cls = backend_class(cfg.api.backend)
    section = cls.config_section(
        cfg.api.backend_settings(),
        run_root=cfg.run_root(),
        quotas={team.queue: team.gpu_quota for team in cfg.teams},
    )
    return cls.from_config(section)


class ServiceContext:
    def __init__(
        self, cfg: HubConfig, backend: Backend, ledger: Ledger, hub_auth: HubOAuth
    ) -> None:
        self.cfg = cfg
        self.backend = backend
        self.ledger = ledger
        self.hub_auth = hub_auth
        lanes = cfg.api.lanes
        self.lanes = Lanes(lanes.ledger, lanes.reads, lanes.writes, lanes.wait)
        self.queue_reports = QueueReports(backend)
        self._users: dict[str, tuple[float, dict[str, Any]]] = {}

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
        self.lanes.close()
        self.ledger.close()
