"""``HubBackend``: the ``hub`` backend, an HTTP client of the hub's aviflow-api service.

A notebook spawned by the hub has ``$AVIFLOW_API_URL`` (the service's base URL) and
``$JUPYTERHUB_API_TOKEN``; with both set, :func:`aviflow.backends.get_backend` picks this
backend, so ``%%aviflow_train`` and ``aviflow.submit`` go through the service, which checks
the user's identity, team and queue. Every read is one request and incremental where the
data grows (events, metrics, logs; events and metrics one page a request, as the service
answers them); a job's spec and meta never change and are fetched once.
Errors come back as the class the service raised (:func:`aviflow.errors.from_wire`).
A submission carries a fresh ``Idempotency-Key`` and is sent again with it when aviflow-api
could not be reached or did not answer (:data:`SUBMIT_TRIES` in all), so a lost answer never
makes a second job.

Checkpoints are read where the notebook mounts the run store: ``$AVIFLOW_RUNS_MOUNT``.

>>> HubBackend("http://127.0.0.1:8000/services/aviflow-api/", token="...")  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from aviflow.backends.base import Backend
from aviflow.bundle import CodeBundle
from aviflow.errors import BackendError, BackendUnavailable, from_wire
from aviflow.estimate import Estimate
from aviflow.paging import Batch
from aviflow.records import (
    CheckpointRef,
    Event,
    FailureInfo,
    JobMeta,
    JobStatus,
    JobSummary,
    LogChunk,
    MetricRow,
    Owner,
    QueueQuota,
    TrainerImage,
)
from aviflow.spec import TrainJob
from aviflow.store import RunStore

API_URL_ENV = "AVIFLOW_API_URL"
TOKEN_ENV = "JUPYTERHUB_API_TOKEN"
USER_ENV = "JUPYTERHUB_USER"  # the hub user a spawned notebook server belongs to
RUNS_MOUNT_ENV = "AVIFLOW_RUNS_MOUNT"
CANCEL_WAIT = 180.0  # seconds cancel() reads the status for the end (a cluster may take 120)
CANCEL_POLL = 0.5
IDEMPOTENCY_HEADER = "Idempotency-Key"
SUBMIT_TRIES = 3
# Statuses that, without aviflow-api's JSON error body, came from the hub or its proxy in its
# place: the proxy without a route (404, 502, 503), and the hub, which the proxy's default
# route reaches until the hub puts the service's route back, refusing the request (403: its
# xsrf check, seen in a full run as the hub restarted; 405: a method it has no handler for)
NOT_ITS_ANSWER = frozenset({403, 404, 405, 502, 503})
SUBMIT_PAUSE = 2.0  # seconds before the second try; twice that before the third


class HubBackend(Backend):
    """Submit and read jobs through aviflow-api with a JupyterHub token."""

    name = "hub"
    authorizes_reads = True  # aviflow-api answers only for what the token's user may see

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        timeout: float = 120,
        runs_mount: str | Path | None = None,
    ) -> None:
        url = url or os.environ.get(API_URL_ENV)
        token = token or os.environ.get(TOKEN_ENV)
        if not url or not token:
            raise BackendError(
                f"the hub backend needs ${API_URL_ENV} and ${TOKEN_ENV} "
                "(set in notebooks the hub starts)"
            )
        self.base = url.rstrip("/") + "/api/v1/"
        self.token = token
        self.timeout = timeout
        mount = runs_mount or os.environ.get(RUNS_MOUNT_ENV)
        self.runs_mount = Path(mount) if mount else None
        self._specs: dict[str, TrainJob] = {}
        self._metas: dict[str, JobMeta] = {}

    def __repr__(self) -> str:
        return f"HubBackend({self.base!r})"

    # -- transport -------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """One request; a refusal is raised as the error class the service sent."""
        params = {k: v for k, v in (query or {}).items() if v is not None}
        url = self.base + path + (("?" + urlencode(params)) if params else "")
        data = json.dumps(body).encode() if body is not None else None
        headers = {
            **(headers or {}),
            "Authorization": f"token {self.token}",
            "Accept": "application/json",
        }
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = None
            if not isinstance(payload, dict):
                payload = {}
            if "error" not in payload and exc.code in NOT_ITS_ANSWER:
                # not aviflow-api's answer (it always sends its JSON error): the hub's proxy
                # has no route to it, or the hub answered in its place (a hub that restarts
                # puts its routes back in a moment): try again, as for a 503
                raise BackendUnavailable(
                    f"aviflow-api is not reachable through the hub right now ({method} {path}: "
                    f"{exc.code} {exc.reason}); try again in a few seconds"
                ) from None
            raise from_wire(
                payload, exc.code, f"aviflow-api refused {method} {path} ({exc.code} {exc.reason})"
            ) from None
        except urllib.error.URLError as exc:
            raise BackendUnavailable(
                f"cannot reach aviflow-api at {self.base}: {exc.reason}"
            ) from None
        except (TimeoutError, ConnectionError) as exc:
            raise BackendUnavailable(
                f"aviflow-api at {self.base} did not answer {method} {path}: {exc}"
            ) from None

    def _job(self, job_id: str, part: str = "", **query: Any) -> Any:
        path = f"jobs/{quote(job_id, safe='')}" + (f"/{part}" if part else "")
        return self.request("GET", path, query=query)

    # -- the interface ---------------------------------------------------------------------------
    def submit(
        self,
        job: TrainJob,
        bundle: CodeBundle,
        owner: Owner | None = None,
        *,
        job_id: str | None = None,
    ) -> str:
        """Submit through the service; the owner is the token's user (``owner`` is ignored)."""
        if job_id is not None:
            raise BackendError("aviflow-api chooses job ids: submit without one")
        payload = {
            "spec": job.to_dict(),
            "bundle": {
                "files": {n: base64.b64encode(b).decode() for n, b in bundle.files.items()},
                "entrypoint": bundle.entrypoint,
                "accelerateConfig": bundle.accelerate_config,
                "origin": bundle.origin,
            },
        }
        key = {IDEMPOTENCY_HEADER: uuid.uuid4().hex}  # a retry is the same submission
        for attempt in range(1, SUBMIT_TRIES):
            try:
                return str(self.request("POST", "jobs", payload, headers=key)["id"])
            except BackendUnavailable:
                time.sleep(SUBMIT_PAUSE * attempt)
        return str(self.request("POST", "jobs", payload, headers=key)["id"])

    def status(self, job_id: str) -> JobStatus:
        return JobStatus.from_dict(self._job(job_id, "status"))

    def request_cancel(self, job_id: str, by: str | None = None) -> bool:
        """One ``POST jobs/{id}/cancel``: aviflow-api asks the backend and answers at once
        (202). ``by`` is ignored: aviflow-api records the hub user the token belongs to."""
        found = self.request("POST", f"jobs/{quote(job_id, safe='')}/cancel", {})
        return bool(found["cancelled"])

    def cancel(self, job_id: str, by: str | None = None) -> bool:
        """:meth:`request_cancel`, then read the job's status until it has ended (a status
        read that aviflow-api refuses as busy, 503, is read again), at most
        :data:`CANCEL_WAIT` seconds."""
        if not self.request_cancel(job_id, by):
            return False
        deadline = time.monotonic() + CANCEL_WAIT
        state = "unknown"
        while time.monotonic() < deadline:
            try:
                status = self.status(job_id)
            except BackendUnavailable as exc:
                state = f"unknown ({exc})"
            else:
                if status.state.is_finished():
                    return True
                state = status.state.value
            time.sleep(CANCEL_POLL)
        raise BackendError(
            f"cancel of {job_id}: asked for, but the job has not ended in {CANCEL_WAIT:.0f}s "
            f"(state: {state}); read its status again later"
        )

    def list_ids(self, newest: int | None = None) -> list[str]:
        return [s.id for s in reversed(self.summaries(newest))]

    def summaries(self, limit: int | None = None, user: str | None = None) -> list[JobSummary]:
        rows = self.request("GET", "jobs", query={"limit": limit, "user": user})["jobs"]
        return [JobSummary.from_dict(r) for r in rows]

    def spec(self, job_id: str) -> TrainJob:
        if job_id not in self._specs:
            self._fetch(job_id)
        return self._specs[job_id]

    def meta(self, job_id: str) -> JobMeta:
        if job_id not in self._metas:
            self._fetch(job_id)
        return self._metas[job_id]

    def _fetch(self, job_id: str) -> None:
        found = self._job(job_id)
        self._specs[job_id] = TrainJob.from_dict(found["spec"])
        self._metas[job_id] = JobMeta.from_dict(found["meta"])

    def events(self, job_id: str, since: int = 0, limit: int | None = None) -> Batch[Event]:
        found = self._job(job_id, "events", since=since, limit=limit)
        events = [Event.from_dict(e) for e in found["events"]]
        return Batch(events, int(found["next"]), found.get("more") is True)

    def metrics(
        self,
        job_id: str,
        since: int = 0,
        after_step: int | None = None,
        limit: int | None = None,
    ) -> Batch[MetricRow]:
        found = self._job(job_id, "metrics", since=since, afterStep=after_step, limit=limit)
        rows = [MetricRow.from_dict(r) for r in found["rows"]]
        return Batch(rows, int(found["next"]), found.get("more") is True)

    def ranks(self, job_id: str) -> list[int]:
        return [int(r) for r in self._job(job_id, "logs")["ranks"]]

    def log(
        self, job_id: str, rank: int, *, tail: int | None = None, offset: int | None = None
    ) -> LogChunk:
        return LogChunk.from_dict(self._job(job_id, f"logs/{int(rank)}", tail=tail, offset=offset))

    def checkpoints(self, job_id: str) -> list[CheckpointRef]:
        return [CheckpointRef.from_dict(c) for c in self._job(job_id, "checkpoints")["checkpoints"]]

    def failures(self, job_id: str) -> list[FailureInfo]:
        return [FailureInfo.from_dict(f) for f in self._job(job_id, "failures")["failures"]]

    def checkpoint_path(self, ref: CheckpointRef) -> Path:
        if self.runs_mount is None:
            raise BackendError(
                f"this notebook does not mount the run store (${RUNS_MOUNT_ENV} is not set), "
                f"so checkpoint step {ref.step} of {ref.job_id} cannot be loaded here"
            )
        return RunStore(self.runs_mount).checkpoint_path(ref)

    # -- images, queues and usage ----------------------------------------------------------------
    def images(self) -> list[TrainerImage]:
        return [TrainerImage.from_dict(i) for i in self.request("GET", "images")["images"]]

    def queues(self) -> list[QueueQuota]:
        return [QueueQuota.from_dict(q) for q in self.request("GET", "queues")["queues"]]

    def quota(self, queue: str) -> QueueQuota | None:
        """The queue's GPU quota and current use as aviflow-api reports it; ``default`` is the
        user's team queue when they have one. None: not one of the user's queues."""
        queues = self.queues()
        if queue == "default" and len(queues) == 1:
            return queues[0]
        return next((q for q in queues if q.queue == queue), None)

    def forecast(self, job: TrainJob) -> Estimate | None:
        """aviflow-api's dry run of ``job`` (``POST jobs?dryRun=true``: the spec is checked
        as a submission's, nothing is created): when it would start in the queue aviflow-api
        picks for the user; None where the backend behind it cannot tell."""
        found = self.request("POST", "jobs", {"spec": job.to_dict()}, query={"dryRun": "true"})
        return Estimate.from_dict(found.get("expectedStart"))

    def usage(self, by: str = "team") -> list[dict[str, Any]]:
        rows = self.request("GET", "usage", query={"by": by})["rows"]
        return list(rows)
