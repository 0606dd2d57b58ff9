"""Faults mid-flight on a private test control plane (issue 24, item 6): four tiny jobs are in
flight at once -- one running, one restarting after a rank was killed, one queued beyond its
team's quota, one that will fail -- while, in turn, the controller (``python -m
aviflow.operator``, with its lease), Kueue's controller manager, kube-apiserver and etcd are
each killed with ``kill -9`` and started again. Afterwards every job has reached the state it
would have reached without the faults, with exactly the events, attempts and attempt Jobs it
would have had, its metrics whole, and its usage a recount of its events.

The cluster is this module's own (``Cluster.kill``/``Cluster.restart``): the session's shared
one serves other tests at the same time. A controller that exits (it loses its lease while
the API server is away, or is killed) is started again at once, as its pod would be.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aviflow_images import own_cluster
from aviflow_pool import Pool, install_crd

from aviflow import api
from aviflow.job import Job
from aviflow.records import EventType, JobState
from aviflow_testcluster import RESTRICTED, Cluster, wait_for

from .trainjob_kit import TORCH_TEST_TIMEOUT, TORCH_WAIT, launcher_process, tiny

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(TORCH_TEST_TIMEOUT)]

E = EventType
ONCE = [E.QUEUED, E.STARTING, E.RUNNING]
LEASE = ["--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "1"]


@pytest.fixture(scope="module")
def faults_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A small cluster of this module's own, with the TrainJob CRD."""
    with own_cluster(tmp_path_factory.mktemp("faults-cluster"), cpu_nodes=0) as cluster:
        yield install_crd(cluster)


class _Controller:
    """``python -m aviflow.operator`` with its lease, started again whenever it exits (a
    pod's restartPolicy); ``kill9`` kills the running one."""

    def __init__(self, pool: Pool, work: Path) -> None:
        self.settings = work / "settings.yaml"
        self.settings.write_text(
            yaml.safe_dump(pool.settings.model_dump(by_alias=True, mode="json"))
        )
        self.kubeconfig, self.work = pool.cluster.kubeconfig, work
        self.exits: list[int] = []
        self._stop = threading.Event()
        self.proc = self._start()
        self._watch = threading.Thread(target=self._keep_up, daemon=True)
        self._watch.start()

    def _start(self) -> subprocess.Popen[bytes]:
        n = len(self.exits)
        with (self.work / f"controller-{n}.log").open("wb") as out:
            return subprocess.Popen(
                [
                    sys.executable, "-m", "aviflow.operator", "--settings", str(self.settings),
                    "--kubeconfig", str(self.kubeconfig), "--workers", "2", "--resync", "10",
                    *LEASE,
                ],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "POD_NAME": f"controller-{n}"},
            )  # fmt: skip

    def _keep_up(self) -> None:
        while not self._stop.wait(0.2):
            code = self.proc.poll()
            if code is not None:
                self.exits.append(code)
                # the kubelet's back-off, short: a controller that cannot reach the API
                # server exits again at once
                if not self._stop.wait(min(8.0, 2.0 ** (len(self.exits) - 1))):
                    self.proc = self._start()

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)

    def logs(self) -> str:
        return "".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.work.glob("controller-*.log"))
        )

    def close(self) -> None:
        self._stop.set()
        self._watch.join(5)
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


def _kinds(job: Job) -> list[EventType]:
    return [e.type for e in job.events() if e.type is not EventType.USAGE]


def _said(jobs: dict[str, Job]) -> str:
    return "; ".join(
        f"{name}: {[(e.type.value, e.attempt) for e in job.events()]}" for name, job in jobs.items()
    )


def _status(cluster: Cluster, ns: str, job_id: str) -> dict[str, Any]:
    got = cluster.kubectl("get", "trainjob", job_id, "-n", ns, "-o", "json").stdout
    status = json.loads(got).get("status") or {}
    return {k: status.get(k) for k in ("state", "attempt")}


def _at(what: str, t0: float, jobs: dict[str, Job]) -> None:
    """Say in the test's output what each job was doing at ``what``."""
    states = {n: f"{j.status.value}/{j.status_record().attempt}" for n, j in jobs.items()}
    print(f"{time.monotonic() - t0:5.0f} s  {what}: {states}", file=sys.stderr)


def test_faults_mid_flight_lose_and_duplicate_nothing(
    faults_cluster: Cluster, tmp_path: Path, trainer_images: list[dict[str, Any]]
) -> None:
    cluster = faults_cluster
    t0 = time.monotonic()
    ns = cluster.create_namespace(labels=RESTRICTED)
    root = tmp_path / "runs"
    root.mkdir()
    pool = Pool(cluster, ns, root, {"a": {"gpus": 2}, "b": {"gpus": 1}}, trainer_images)
    ctl = _Controller(pool, tmp_path)
    slow = {"TINY_STEP_SLEEP": "0.3", "TINY_CKPT_EVERY": "10"}
    try:
        failing = {"TINY_FAIL_RANK": "0", "TINY_FAIL_STEP": "100"}
        specs = {
            "steady": tiny("steady", "a", nodes=1, gpus=1, env={**slow, "TINY_STEPS": "120"}),
            "restarts": tiny(
                "restarts", "a", nodes=1, gpus=1, maxRestarts=1, env={**slow, "TINY_STEPS": "60"}
            ),
            "fails": tiny(
                "fails", "b", nodes=1, gpus=1, env={**slow, **failing, "TINY_STEPS": "120"}
            ),
        }
        jobs = {name: api.submit(spec, pool.backend) for name, spec in specs.items()}
        restarts = jobs["restarts"]
        wait_for(
            lambda: (
                all(j.status is JobState.RUNNING for j in jobs.values())
                and any(c.step >= 10 for c in restarts.checkpoints())
            ),
            240,
            lambda: f"three jobs running, one with a checkpoint: {_said(jobs)}",
        )
        # beyond team a's quota (its two GPUs are held): queued, at position 1
        jobs["queued"] = api.submit(
            tiny("queued", "a", nodes=1, gpus=1, env={**slow, "TINY_STEPS": "20"}), pool.backend
        )
        wait_for(
            lambda: jobs["queued"].status_record().queue_position == 1,
            60,
            lambda: f"the fourth job queued at position 1: {jobs['queued'].status_record()}",
        )
        _at("a launcher and the controller killed", t0, jobs)

        # 1. a node's training process (its launcher) dies and the controller with it: the
        # restart is in flight with no one to record it; the next controller (after the lease
        # runs out) records it once
        run_dir = (
            f"/aviflow/runs/{pool.backend.run_dir(restarts.id).path.parent.name}/{restarts.id}"
        )
        wait_for(lambda: launcher_process(run_dir), 30, "its launcher").kill()
        ctl.kill9()
        wait_for(lambda: E.RESTARTING in _kinds(restarts), 120, lambda: _said(jobs) + ctl.logs())

        # 2. Kueue's controller manager (its webhooks too: no Job can be created meanwhile)
        _at("Kueue killed", t0, jobs)
        cluster.kill("kueue")
        time.sleep(3)
        cluster.restart("kueue")
        # 3. the API server: every watch breaks, the controller loses its lease and exits
        _at("kube-apiserver killed", t0, jobs)
        cluster.kill("kube-apiserver")
        time.sleep(3)
        cluster.restart("kube-apiserver")
        # 4. etcd (it runs without fsync; a process kill keeps the page cache)
        _at("etcd killed", t0, jobs)
        cluster.kill("etcd")
        time.sleep(2)
        cluster.restart("etcd")
        cluster.wait_healthy("kube-apiserver")
        _at("faults done", t0, jobs)
        assert cluster.dead() == []  # each component up again, none ended by the next fault

        for name, job in jobs.items():
            expected = JobState.FAILED if name == "fails" else JobState.SUCCEEDED
            got = job.wait(timeout=TORCH_WAIT)
            assert got is expected, (name, _said(jobs), ctl.logs())
        print(
            f"all ended after {time.monotonic() - t0:.0f} s; controller exits {ctl.exits}",
            file=sys.stderr,
        )
        assert ctl.exits[0] == -signal.SIGKILL, ctl.exits

        # no job lost or made twice: the run store's and the cluster's
        ids = sorted(j.id for j in jobs.values())
        assert sorted(pool.backend.list_ids()) == ids
        trainjobs = cluster.kubectl("get", "trainjobs", "-n", ns, "-o", "name").stdout.split()
        assert sorted(trainjobs) == [f"trainjob.aviflow.dev/{i}" for i in ids], trainjobs
        # exactly the events each would have had without the faults
        expected = {
            "steady": [*ONCE, E.SUCCEEDED],
            "restarts": [*ONCE, E.RESTARTING, *ONCE, E.SUCCEEDED],
            "queued": [*ONCE, E.SUCCEEDED],
            "fails": [*ONCE, E.FAILED],
        }
        assert {n: _kinds(j) for n, j in jobs.items()} == expected, _said(jobs)
        for name, job in jobs.items():
            events = job.events()
            starts = [e for e in events if e.type is E.STARTING]
            assert [e.attempt for e in starts] == list(range(1, len(starts) + 1)), name
            # every GPU-second attributed: usage is a recount of the events, each admission once
            ends = [e.time for e in events if e.type in (E.RESTARTING, E.SUCCEEDED, E.FAILED)]
            held = sum(end - s.time for s, end in zip(starts, ends, strict=True))
            usage = job.usage()
            assert (usage.attempts, usage.gpus) == (len(starts), 1), (name, usage)
            assert usage.running_seconds == pytest.approx(held), (name, usage)
            # the TrainJob's status says the same (patched just after the run store's)
            want = {"state": job.status.value, "attempt": len(starts)}
            wait_for(lambda j=job, w=want: _status(cluster, ns, j.id) == w, 30, f"{name}: {want}")
        # its launcher killed: no rank's record, so the node's exit (128 + SIGKILL) says it
        restart = next(e for e in restarts.events() if e.type is E.RESTARTING)
        failure = restart.failure
        assert failure is not None and (failure.node, failure.exit_code) == (0, 137), restart
        failure = jobs["fails"].failure
        assert failure is not None and failure.rank == 0, failure
        assert "injected failure on rank 0 at step 100" in failure.traceback, failure
        # every metric row once: the steady job's steps 1..120, the restarted one resumed
        assert [r["step"] for r in jobs["steady"].metric_rows()] == list(range(1, 121))
        steps = [r["step"] for r in restarts.metric_rows()]
        assert steps.count(1) == 1 and steps[-1] == 60, steps
        # exactly the attempt Jobs: one per attempt, none made twice
        made = cluster.kubectl("get", "jobs", "-n", ns, "-o", "name").stdout.split()
        assert sorted(made) == sorted(
            f"job.batch/{j.id}-a{a}"
            for j in jobs.values()
            for a in range(1, _kinds(j).count(E.STARTING) + 1)
        ), made
    finally:
        ctl.close()
        pool.close()
