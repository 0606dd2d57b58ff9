"""The aviflow-api tornado application and its entry point.

Run by JupyterHub as a managed service (``python -m aviflow_hub.service --config FILE``):
the hub passes ``JUPYTERHUB_API_TOKEN``, ``JUPYTERHUB_SERVICE_PREFIX``, the OAuth client id
and the service URL in the environment.

The service builds its backend from the config (``api.backend`` and its section), starts it,
and follows its change feed into the ledger every ``api.ingestEvery`` seconds
(:class:`~aviflow_hub.service.ingest.Ingest`), and, where the backend reports what queues
borrow, its queues every few seconds while someone watches them (:mod:`.queue_reports`);
request handlers only read. Blocking calls run in lanes, bounded thread pools by kind
(:mod:`.lanes`: the ledger, the backend's reads, submissions and cancels, the change feed), so
a backend that stalls never holds the ledger's listings; a lane with no free worker answers 503
with Retry-After. Handlers, one module per concern: :mod:`.jobs`, :mod:`.parts`, :mod:`.queues`,
:mod:`.pages` (their HTML in :mod:`.page_html`); shared authentication, errors and parameters in
:mod:`.base` and :mod:`.params`.
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

from aviflow.views.snapshot import SnapshotReaders
from aviflow_hub.config import load_config
from aviflow_hub.ledger.store import Ledger
from aviflow_hub.service.base import NotFound, SecurityHeaders
from aviflow_hub.service.context import ServiceContext, make_backend
from aviflow_hub.service.ingest import Ingest
from aviflow_hub.service.jobs import CancelHandler, JobHandler, JobsHandler
from aviflow_hub.service.pages import (
    CancelForm,
    HomePage,
    JobPage,
    OpenApiHandler,
    ReportPage,
)
from aviflow_hub.service.parts import PARTS, JobPartHandler, LogHandler
from aviflow_hub.service.queue_reports import QueueRefresher
from aviflow_hub.service.queues import ImagesHandler, MetricsHandler, QueuesHandler, UsageHandler

log = logging.getLogger("aviflow_hub.service")
_ID = r"([^/]+)"  # checked by the handlers: a bad id is a JSON 404, not a missing route
# Request bodies besides a submission (which streams, see jobs.py) are small forms.
MAX_BODY_SIZE = 1 << 20


class OAuthCallback(SecurityHeaders, HubOAuthCallbackHandler):
    """Finishes the OAuth login with the service's own HubOAuth (it holds the PKCE state)."""

    def initialize(self, ctx: ServiceContext) -> None:
        self.hub_auth = ctx.hub_auth


def make_app(ctx: ServiceContext) -> Application:
    prefix = ctx.hub_auth.base_url
    api = prefix + "api/v1/"
    kw = {"ctx": ctx}
    routes = [
        (prefix, HomePage, kw),
        (prefix + "report", ReportPage, kw),
        (prefix + "metrics", MetricsHandler, kw),
        (prefix + "oauth_callback", OAuthCallback, kw),
        (prefix + rf"jobs/{_ID}", JobPage, {**kw, "readers": SnapshotReaders()}),
        (prefix + rf"jobs/{_ID}/cancel", CancelForm, kw),
        (api + "openapi.json", OpenApiHandler, kw),
        (api + "jobs", JobsHandler, kw),
        (api + rf"jobs/{_ID}", JobHandler, kw),
        (api + rf"jobs/{_ID}/cancel", CancelHandler, kw),
        (api + rf"jobs/{_ID}/logs/([^/]+)", LogHandler, kw),
        (api + rf"jobs/{_ID}/({'|'.join(PARTS)})", JobPartHandler, kw),
        (api + "queues", QueuesHandler, kw),
        (api + "images", ImagesHandler, kw),
        (api + "usage", UsageHandler, kw),
    ]
    return Application(
        routes,
        hub_auth=ctx.hub_auth,
        cookie_secret=secrets.token_bytes(32),
        default_handler_class=NotFound,
        default_handler_args=kw,
    )


async def serve(config_path: str) -> None:
    cfg = load_config(config_path)
    data = cfg.data_path()
    data.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(cfg.ledger_url())
    hub_auth = HubOAuth.instance(api_token=os.environ["JUPYTERHUB_API_TOKEN"], cache_max_age=60)
    backend = make_backend(cfg)
    backend.start()
    ctx = ServiceContext(cfg, backend, ledger, hub_auth)
    app = make_app(ctx)
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL") or cfg.api_url)
    server = app.listen(
        url.port or 80, url.hostname or "127.0.0.1", xheaders=True, max_body_size=MAX_BODY_SIZE
    )
    feed = Ingest(backend, ledger)
    busy = asyncio.Lock()

    async def ingest() -> None:
        if busy.locked():
            return
        async with busy:
            try:
                await ctx.lanes.ingest.run(feed.step)
            except Exception:
                log.exception("reading the change feed into the ledger failed")

    await ingest()  # catch up on everything that happened while the service was down
    poller = PeriodicCallback(ingest, cfg.api.ingest_every * 1000)
    poller.start()
    queues = QueueRefresher(ctx.queue_reports, ctx.lanes.queues)
    if backend.reports_borrowing:
        await queues.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        log.info("aviflow-api stopping on %s", sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    log.info("aviflow-api listening on %s%s", url.geturl(), hub_auth.base_url)
    await stop.wait()
    poller.stop()
    queues.stop()
    server.stop()
    backend.stop()
    feed.close()
    ctx.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m aviflow_hub.service")
    parser.add_argument("--config", default=os.environ.get("AVIFLOW_HUB_CONFIG"), required=False)
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[aviflow-api %(levelname)s] %(message)s")
    asyncio.run(serve(ns.config))
