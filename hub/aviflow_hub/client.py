"""``HubBackend``: the ``hub`` backend, an HTTP client of aviflow-api.

A notebook spawned by the hub has ``$AVIFLOW_API_URL`` (the service's base URL) and
``$JUPYTERHUB_API_TOKEN``; with both set, ``aviflow.backends.get_backend()`` picks this
backend, so ``%%aviflow_train`` and ``aviflow.submit`` go through the service, which checks
the user's identity, team and queue. It has no local run store: every read is a request.

>>> from aviflow_hub.client import HubBackend
>>> HubBackend("http://127.0.0.1:8000/services/aviflow-api/", token="...")  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlencode

from aviflow.backends.base import Backend
from aviflow.bundle import CodeBundle
from aviflow.errors import BackendError, JobNotFound
from aviflow.spec import TrainJob
from aviflow.status import Event
from aviflow.store import RunDir

API_URL_ENV = "AVIFLOW_API_URL"
TOKEN_ENV = "JUPYTERHUB_API_TOKEN"


class HubBackend(Backend):
    """Submit and read jobs through aviflow-api with a JupyterHub token."""

    name = "hub"

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 120) -> None:
        url = url or os.environ.get(API_URL_ENV)
        token = token or os.environ.get(TOKEN_ENV)
        if not url or not token:
            raise BackendError(f"the hub backend needs ${API_URL_ENV} and ${TOKEN_ENV} "
                               "(set in notebooks the hub starts)")
        self.base = url.rstrip("/") + "/api/v1/"
        self.token = token
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"HubBackend({self.base!r})"

    # -- transport --------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None) -> Any:
        url = self.base + path + (("?" + urlencode(query)) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"token {self.token}", "Accept": "application/json",
            **({"Content-Type": "application/json"} if data is not None else {})})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("message") or exc.reason
            except ValueError:
                message = exc.reason
            if exc.code == 404:
                raise JobNotFound(f"aviflow-api: {message}") from None
            raise BackendError(f"aviflow-api refused {method} {path} ({exc.code}): {message}") from None
        except urllib.error.URLError as exc:
            raise BackendError(f"cannot reach aviflow-api at {self.base}: {exc.reason}") from None

    def _job(self, job_id: str, part: str = "") -> Any:
        return self.request("GET", f"jobs/{quote(job_id, safe='')}" + (f"/{part}" if part else ""))

    # -- the interface ----------------------------------------------------------------------------
    def submit(self, job: TrainJob, bundle: CodeBundle) -> str:
        payload = {"spec": job.to_dict(), "bundle": {
            "files": {n: base64.b64encode(b).decode() for n, b in bundle.files.items()},
            "entrypoint": bundle.entrypoint, "accelerateConfig": bundle.accelerate_config,
            "origin": bundle.origin}}
        return self.request("POST", "jobs", payload)["id"]

    def status(self, job_id: str) -> dict[str, Any]:
        return self._job(job_id)["status"]

    def cancel(self, job_id: str) -> bool:
        return bool(self.request("POST", f"jobs/{quote(job_id, safe='')}/cancel", {})["cancelled"])

    def list_ids(self) -> list[str]:
        return [j["id"] for j in self.request("GET", "jobs")["jobs"]]

    def run_dir(self, job_id: str) -> RunDir:
        raise BackendError("jobs submitted through the hub have no local run directory; "
                           "use the Job methods (logs, metrics, checkpoints) instead")

    # -- reads over HTTP --------------------------------------------------------------------------
    def spec(self, job_id: str) -> TrainJob:
        return TrainJob.from_dict(self._job(job_id)["spec"])

    def meta(self, job_id: str) -> dict[str, Any]:
        return self._job(job_id)["meta"]

    def events(self, job_id: str) -> list[Event]:
        return [Event.from_dict(e) for e in self._job(job_id, "events")["events"]]

    def metrics(self, job_id: str) -> list[dict[str, Any]]:
        return self._job(job_id, "metrics")["rows"]

    def checkpoints(self, job_id: str) -> list[dict[str, Any]]:
        return self._job(job_id, "checkpoints")["checkpoints"]

    def failures(self, job_id: str) -> list[dict[str, Any]]:
        return self._job(job_id, "failures")["failures"]

    def ranks(self, job_id: str) -> list[int]:
        return self._job(job_id, "logs")["ranks"]

    def log_text(self, job_id: str, rank: int) -> str:
        return self._job(job_id, f"logs/{int(rank)}")["text"]

    # -- hub-only reads ---------------------------------------------------------------------------
    def queues(self) -> list[dict[str, Any]]:
        return self.request("GET", "queues")["queues"]

    def quota(self, queue: str) -> dict[str, Any] | None:
        """The queue's GPU quota and current use as aviflow-api reports it; ``default`` is the
        user's team queue when they have one. None: not one of the user's queues."""
        queues = self.queues()
        if queue == "default" and len(queues) == 1:
            queue = queues[0]["queue"]
        for q in queues:
            if q["queue"] == queue:
                return {k: q[k] for k in ("queue", "gpuQuota", "gpusInUse", "pendingCount")}
        return None

    def usage(self, by: str = "team") -> list[dict[str, Any]]:
        return self.request("GET", "usage", query={"by": by})["rows"]
