"""The kubernetes backend against an API server that never answers, or is not there: every
call gives up after its timeout (``apiTimeout``) with a BackendUnavailable saying so. A
submission that never reached the API server leaves nothing behind; one that may have keeps
its directory, pending. No cluster: a TCP server that accepts and stays silent stands in."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from aviflow.backends.kubernetes import KubernetesBackend
from aviflow.bundle import build_bundle
from aviflow.errors import BackendError, BackendUnavailable
from aviflow.k8s.settings import ApiTimeout
from aviflow.records import JobState, JobStatus
from aviflow.spec import TrainJob

JOB = TrainJob.from_dict(
    {"metadata": {"name": "waits"}, "spec": {"command": ["true"], "queue": "default"}}
)
ADVICE = (
    "try again in a minute. If it goes on, ask an admin to check the API server and the network "
    "to it (the kubernetes settings' apiTimeout: how long a call may wait)"
)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port where connections are accepted and never answered."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for conn in held:
        conn.close()


def backend(tmp_path: Path, port: int) -> KubernetesBackend:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    return KubernetesBackend.from_config(
        {
            "kubeconfig": str(kubeconfig),
            "image": "trainer:1",
            "runs": {"localPath": str(tmp_path / "runs")},
            "apiTimeout": {"connect": 1, "read": 1.5},
        }
    )


def raised(fn: Any, *args: Any) -> tuple[BackendUnavailable, float]:
    start = time.monotonic()
    with pytest.raises(BackendUnavailable) as info:
        fn(*args)
    return info.value, time.monotonic() - start


def test_the_timeout_is_a_setting_with_defaults() -> None:
    assert ApiTimeout.from_dict(None) == ApiTimeout(connect=5.0, read=30.0)
    assert KubernetesBackend().api_timeout == ApiTimeout()
    with pytest.raises(BackendError, match="bad apiTimeout: read"):
        KubernetesBackend.from_config({"apiTimeout": {"read": 0}})
    with pytest.raises(BackendError, match="bad apiTimeout"):
        KubernetesBackend.from_config({"apiTimeout": {"reed": 3}})


def test_a_silent_api_server_fails_each_call_after_its_timeout(
    tmp_path: Path, silent_port: int
) -> None:
    b = backend(tmp_path, silent_port)
    server = f"the Kubernetes API server at http://127.0.0.1:{silent_port}"
    error, took = raised(b.submit, JOB, build_bundle(JOB))
    # the create was sent: it may have been applied, so it is sent once more (a 409 would
    # say so), and the directory stays, pending, for the controller to settle
    [left] = b.list_ids()
    assert str(error) == (
        f"submitting 'waits': {server} did not answer within 1.5 s (ReadTimeoutError); {ADVICE} "
        f"Job {left} is recorded, and its TrainJob may have been created: the controller takes "
        "it up if it was, and marks it failed ('the submission did not complete') after its "
        "grace period if it was not. Submitting again with the same Idempotency-Key "
        "(aviflow-api) settles it at once."
    )
    assert took < 2 * 1.5 + 10 and [i for i, _ in b.store.pending()] == [left]
    run = b.store.create(JOB, build_bundle(JOB).store_files(), "ada", backend="kubernetes")
    run.write_status(JobStatus(JobState.QUEUED, 0, "waiting", time.time()))
    for call in (b.request_cancel, b.cancel):
        error, took = raised(call, run.id)
        assert str(error) == (
            f"cancel of {run.id}: {server} did not answer within 1.5 s (ReadTimeoutError); {ADVICE}"
        )
        assert took < 1.5 + 10
    error, took = raised(b.queues)
    assert str(error).startswith(f"reading Kueue's queues: {server} did not answer within 1.5 s")
    assert took < 1.5 + 10  # a GET: its read is not tried again either
    assert b.status(run.id).state is JobState.QUEUED  # reads come from the run store


def test_an_api_server_that_is_not_there_is_unreachable(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free again once closed: nothing listens there
    b = backend(tmp_path, port)
    error, took = raised(b.submit, JOB, build_bundle(JOB))
    assert str(error).startswith(
        f"submitting 'waits': the Kubernetes API server at http://127.0.0.1:{port} cannot be "
        "reached (NewConnectionError: "
    )
    assert str(error).endswith(ADVICE) and took < 10 and b.list_ids() == []
