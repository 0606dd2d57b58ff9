"""Two controllers at once (``python -m aviflow.operator`` processes, as the chart's two
replicas run): one leads on the Lease, the other waits; a leader that stops answering is
replaced within the lease, and when it wakes it writes nothing and exits; a leader killed
with ``kill -9`` is replaced too. Through all of it a job that restarts once is recorded
exactly once per event, and its ledger numbers are a recount of its events."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from aviflow import api
from aviflow._ports import free_port
from aviflow.operator._controller import Controller, Deposed
from aviflow.operator._leader import LEASE, Leadership, Timing
from aviflow.records import EventType, JobState
from aviflow_testcluster import wait_for

from .trainjob_kit import TORCH_TEST_TIMEOUT, TORCH_WAIT, launcher_process, tiny

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(TORCH_TEST_TIMEOUT)]

TIMING = Timing(lease_duration=4, renew_deadline=3, retry_period=1)


def test_timing_is_checked() -> None:
    with pytest.raises(ValueError, match="lease duration > renew deadline"):
        Timing(lease_duration=10, renew_deadline=10, retry_period=2)
    with pytest.raises(ValueError, match=r"1\.2 x retry period"):
        Timing(lease_duration=15, renew_deadline=2, retry_period=2)
    with pytest.raises(ValueError, match=r"whole seconds; got 4\.5"):
        Timing(lease_duration=4.5, renew_deadline=3, retry_period=1)  # type: ignore[arg-type]


def test_the_fence_closes_at_the_renew_deadline(make_pool: Any) -> None:
    """``holds`` is true from the start of a successful renewal until the renew deadline,
    false once the lease is lost; a controller fenced by it writes nothing."""
    pool = make_pool(controller=False)
    leader = Leadership(pool.api, pool.namespace, "me", TIMING)
    assert not leader.holds()  # never acquired
    leader._renewed(time.monotonic())
    assert leader.holds()
    leader._renewed(time.monotonic() - TIMING.renew_deadline)
    assert not leader.holds()
    leader._renewed(time.monotonic())
    leader.release()  # it never held the Lease object: nothing to give up, and it stops
    assert not leader.holds()
    ctl = Controller(pool.api, pool.settings, pool.backend.store, fence=leader.holds)
    with pytest.raises(Deposed):
        ctl.reconcile(f"{pool.namespace}/anything")


class _Candidate:
    """``python -m aviflow.operator`` as a pod would run it, named ``name``."""

    def __init__(self, pool: Any, settings: Path, name: str, work: Path) -> None:
        self.name, self.log = name, work / f"{name}.log"
        self.health = f"http://127.0.0.1:{free_port()}/healthz"
        with self.log.open("wb") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [
                    sys.executable, "-m", "aviflow.operator", "--settings", str(settings),
                    "--kubeconfig", str(pool.cluster.kubeconfig), "--workers", "2",
                    "--resync", "10", "--lease-duration", str(TIMING.lease_duration),
                    "--renew-deadline", str(TIMING.renew_deadline),
                    "--retry-period", str(TIMING.retry_period),
                    "--health-port", self.health.split(":")[-1].split("/")[0],
                ],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "POD_NAME": name},
            )  # fmt: skip

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
        self.proc.wait(30)


def _holder(pool: Any) -> str:
    out = pool.cluster.kubectl(
        "get", "lease", LEASE, "-n", pool.namespace, "--ignore-not-found",
        "-o", "jsonpath={.spec.holderIdentity}",
    )  # fmt: skip
    return str(out.stdout.strip())


def test_a_second_controller_takes_over_and_nothing_is_recorded_twice(
    make_pool: Any, tmp_path: Path
) -> None:
    pool = make_pool(controller=False)
    settings = tmp_path / "settings.yaml"
    settings.write_text(yaml.safe_dump(pool.settings.model_dump(by_alias=True, mode="json")))
    a = _Candidate(pool, settings, "ctl-a", tmp_path)
    candidates = [a]
    try:
        wait_for(
            lambda: _holder(pool).startswith("ctl-a_"),
            120,
            lambda: f"ctl-a leads; its log:\n{a.text()[-4000:]}",
        )
        wait_for(lambda: "ctl-a" in a.text() and " leads" in a.text(), 120, "ctl-a started")
        b = _Candidate(pool, settings, "ctl-b", tmp_path)
        candidates.append(b)
        wait_for(lambda: "waiting for the lease" in b.text(), 60, "ctl-b is a candidate")
        spec = tiny(
            "two controllers",
            nodes=1,
            maxRestarts=1,
            env={"TINY_STEPS": "60", "TINY_CKPT_EVERY": "10", "TINY_STEP_SLEEP": "0.3"},
        )
        job = api.submit(spec, pool.backend)
        wait_for(lambda: any(c.step >= 10 for c in job.checkpoints()), TORCH_WAIT, "a checkpoint")
        assert " leads" not in b.text()  # two running, one acting
        # both live, the leader working and the candidate waiting (the chart's probe)
        for cand in (a, b):
            got = requests.get(cand.health, timeout=10)
            assert (got.status_code, got.text) == (200, "ok\n"), cand.name

        # the leader stops answering (a partition, a paused node): the other takes over once
        # the lease has run out
        a.signal(signal.SIGSTOP)
        stopped = time.monotonic()
        wait_for(lambda: _holder(pool).startswith("ctl-b_"), 60, "ctl-b takes the lease")
        takeover = time.monotonic() - stopped
        print(f"takeover after a stopped leader: {takeover:.1f} s", file=sys.stderr)
        assert takeover < TIMING.lease_duration + 4 * TIMING.retry_period + 5, takeover
        wait_for(lambda: " leads" in b.text(), 60, "ctl-b started")

        # attempt 1 fails under the new leader: one restart, counted once
        run_dir = f"/aviflow/runs/{pool.backend.run_dir(job.id).path.parent.name}/{job.id}"
        wait_for(lambda: launcher_process(run_dir), 30, "node 0's launcher").kill()
        wait_for(
            lambda: [e.type for e in job.events()].count(EventType.RUNNING) == 2,
            240,
            lambda: f"attempt 2 runs; events {[(e.type.value, e.attempt) for e in job.events()]}",
        )
        # the deposed leader wakes: it may write nothing, and it exits to start again
        a.signal(signal.SIGCONT)
        assert a.proc.wait(60) == 1, a.text()[-3000:]
        assert "lost the lease" in a.text(), a.text()[-3000:]

        # the new leader is killed mid-attempt; its replacement takes over
        b.signal(signal.SIGKILL)
        c = _Candidate(pool, settings, "ctl-c", tmp_path)
        candidates.append(c)
        wait_for(lambda: _holder(pool).startswith("ctl-c_"), 60, "ctl-c takes the lease")
        assert job.wait(timeout=TORCH_WAIT) is JobState.SUCCEEDED, job.logs(0)
    finally:
        for cand in candidates:
            cand.close()
    events = job.events()
    assert [e.type for e in events if e.type is not EventType.USAGE] == [
        EventType.QUEUED, EventType.STARTING, EventType.RUNNING,
        EventType.RESTARTING, EventType.QUEUED, EventType.STARTING, EventType.RUNNING,
        EventType.SUCCEEDED,
    ], [(e.type.value, e.attempt, e.message) for e in events]  # fmt: skip
    assert [e.attempt for e in events if e.type is EventType.STARTING] == [1, 2]
    jobs = pool.cluster.kubectl("get", "jobs", "-n", pool.namespace, "-o", "name").stdout.split()
    assert sorted(jobs) == [f"job.batch/{job.id}-a1", f"job.batch/{job.id}-a2"]
    # the ledger's numbers are a recount of the events: each attempt's admitted time once
    starts = [e.time for e in events if e.type is EventType.STARTING]
    ends = [e.time for e in events if e.type in (EventType.RESTARTING, EventType.SUCCEEDED)]
    held = sum(end - start for start, end in zip(starts, ends, strict=True))
    usage = job.usage()
    assert (usage.attempts, usage.gpus) == (2, 2), usage
    assert usage.running_seconds == pytest.approx(held), usage
