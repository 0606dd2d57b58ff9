"""The aviflow-api tornado application and its entry point.

Run by JupyterHub as a managed service (``python -m aviflow_hub.service --config FILE``):
the hub passes ``JUPYTERHUB_API_TOKEN``, ``JUPYTERHUB_SERVICE_PREFIX``, the OAuth client id
and the service URL in the environment.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import signal
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler
from tornado.ioloop import PeriodicCallback
from tornado.web import Application

from aviflow_hub.config import load_config
from aviflow_hub.ledger.store import Ledger
from aviflow_hub.service import handlers as h
from aviflow_hub.service.context import ServiceContext, make_backend

log = logging.getLogger("aviflow_hub.service")
_ID = r"([a-z0-9][-a-z0-9]*)"


class OAuthCallback(HubOAuthCallbackHandler):
    """Finishes the OAuth login with the service's own HubOAuth (it holds the PKCE state)."""

    def initialize(self, ctx: ServiceContext) -> None:
        self.hub_auth = ctx.hub_auth


def make_app(ctx: ServiceContext) -> Application:
    prefix = ctx.hub_auth.base_url
    api = prefix + "api/v1/"
    kw = {"ctx": ctx}
    routes = [
        (prefix, h.HomePage, kw),
        (prefix + "report", h.ReportPage, kw),
        (prefix + "metrics", h.MetricsHandler, kw),
        (prefix + "oauth_callback", OAuthCallback, kw),
        (prefix + rf"jobs/{_ID}/cancel", h.CancelForm, kw),
        (api + "openapi.json", h.OpenApiHandler, kw),
        (api + "jobs", h.JobsHandler, kw),
        (api + rf"jobs/{_ID}", h.JobHandler, kw),
        (api + rf"jobs/{_ID}/cancel", h.CancelHandler, kw),
        (api + rf"jobs/{_ID}/logs/(\d+)", h.LogHandler, kw),
        (api + rf"jobs/{_ID}/(events|metrics|checkpoints|failures|logs)", h.JobPartHandler, kw),
        (api + "queues", h.QueuesHandler, kw),
        (api + "usage", h.UsageHandler, kw),
    ]
    return Application(routes, hub_auth=ctx.hub_auth, cookie_secret=secrets.token_bytes(32))


async def serve(config_path: str) -> None:
    cfg = load_config(config_path)
    data = cfg.data_path()
    data.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(cfg.ledger_url())
    hub_auth = HubOAuth.instance(api_token=os.environ["JUPYTERHUB_API_TOKEN"], cache_max_age=60)
    ctx = ServiceContext(cfg, make_backend(cfg), ledger, hub_auth)
    app = make_app(ctx)
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL") or cfg.api_url)
    server = app.listen(url.port or 80, url.hostname or "127.0.0.1", xheaders=True)
    busy = asyncio.Lock()

    async def ingest() -> None:
        if busy.locked():
            return
        async with busy:
            try:
                await ctx.run(ledger.ingest, ctx.backend)
            except Exception:
                log.exception("ledger ingestion failed")

    await ingest()  # catch up on everything that happened while the service was down
    PeriodicCallback(ingest, cfg.api.ingest_every * 1000).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        log.info("aviflow-api stopping on %s", sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    log.info("aviflow-api listening on %s%s", url.geturl(), hub_auth.base_url)
    await stop.wait()
    server.stop()
    ctx.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m aviflow_hub.service")
    parser.add_argument("--config", default=os.environ.get("AVIFLOW_HUB_CONFIG"), required=False)
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[aviflow-api %(levelname)s] %(message)s")
    asyncio.run(serve(ns.config))
