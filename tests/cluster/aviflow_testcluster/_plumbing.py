"""The test cluster's loopback plumbing: free ports, pod IP blocks, kubeconfigs, waits."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from aviflow import _ports

from . import _procs


class ClusterError(RuntimeError):
    pass


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports, below the kernel's ephemeral range (``aviflow._ports``);
    one can still be lost to another cluster starting, which ``Cluster.start`` survives by
    trying again with fresh ports."""
    try:
        return _ports.free_ports(n)
    except OSError as e:
        raise ClusterError(str(e)) from None


def free_port() -> int:
    return free_ports(1)[0]


def _claim_ip_block(root: Path, cluster_id: str) -> int:
    """Second octet of a 127.<b>.0.0/16 block for pod IPs, unique among live clusters."""
    claims = root / "ip-blocks"
    claims.mkdir(parents=True, exist_ok=True)
    import random

    candidates = list(range(10, 250))
    random.shuffle(candidates)
    for b in candidates:
        claim = claims / str(b)
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                owner = json.loads(claim.read_text())
            except (OSError, ValueError):
                continue
            if _procs.alive(owner.get("pid", 0)) and owner.get("id") != cluster_id:
                continue
            claim.unlink(missing_ok=True)
            try:
                fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                continue
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": os.getpid(), "id": cluster_id}, f)
        return b
    raise ClusterError("no free 127.x.0.0/16 block for pod IPs")


_CLAIMS_ROOT = Path("/tmp/aviflow-testcluster")


def _kubeconfig(server: str, ca: bytes, crt: bytes, key: bytes, user: str = "admin") -> dict:
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "aviflow-test",
                "cluster": {"server": server, "certificate-authority-data": b64(ca)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": b64(crt), "client-key-data": b64(key)},
            }
        ],
        "contexts": [
            {"name": "aviflow-test", "context": {"cluster": "aviflow-test", "user": user}}
        ],
        "current-context": "aviflow-test",
    }


def _exists(fn) -> bool:
    from kubernetes.client import ApiException

    try:
        fn()
        return True
    except ApiException as e:
        if e.status == 404:
            return False
        raise


def _wait(pred: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + max(timeout, 0)
    while True:
        if pred():
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out waiting for {what}")
        time.sleep(interval)
