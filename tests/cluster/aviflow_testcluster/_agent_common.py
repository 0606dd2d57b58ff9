"""What the node agent's modules share: constants, timestamps, the pod sandbox layout.

A pod's sandbox is ``<state-dir>/pods/<namespace>/<pod>/`` (``logs/<container>.log``,
``hosts``, ``volumes/``); ``container_log_path`` is also how ``Cluster.read_logs`` and the
log server find a container's output.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Any

from kubernetes import watch

log = logging.getLogger("aviflow.node-agent")

K8S_VERSION = "v1.35.4"
LEASE_SECONDS = 40
WATCH_SECONDS = 60
SETUP_RETRY_SECONDS = 1.0
RUNTIME = "aviflow-process://1"


class RawWatch(watch.Watch):
    """A watch whose events carry the API server's JSON only (``raw_object``, which is all
    the agent reads): the client's own also decodes each object into its models, a Pod's
    costing milliseconds of CPU, for every pod of the cluster, on the cores the control
    plane shares."""

    def get_return_type(self, func: Any) -> None:
        return None


class PodKilled(Exception):
    """A container was about to start after the pod runner's ``kill()``: the runner stops."""


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pod_dir(pods_dir: Path, namespace: str, pod: str) -> Path:
    return pods_dir / namespace / pod


def container_log_path(
    pods_dir: Path, namespace: str, pod: str, container: str | None = None
) -> Path:
    logs = pod_dir(pods_dir, namespace, pod) / "logs"
    if container is None:
        names = sorted(p.stem for p in logs.glob("*.log"))
        if len(names) != 1:
            raise ValueError(f"pod {namespace}/{pod} has containers {names}; name one")
        container = names[0]
    return logs / f"{container}.log"


def waiting(c: dict, reason: str, message: str = "") -> dict:
    """A container status that waits with ``reason`` (and ``message``)."""
    return {
        "name": c["name"],
        "image": c.get("image", ""),
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": 0,
        "state": {"waiting": {"reason": reason, **({"message": message} if message else {})}},
    }
