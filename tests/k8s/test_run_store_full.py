"""The run store full for a minute on the test control plane, with the controller running:
a small tmpfs holds the pool's run store (its hostPath; the test runs as root, as ``make
test`` does) and is filled while a training job runs and a short one ends.

The training job trains on (its output, metric rows and checkpoints wait or are skipped, see
``tests/core/test_store_full.py``) and ends SUCCEEDED with every metric row; the short job's
end waits in the controller, which says once that the store is full and once that it took
the end; a submission meanwhile is refused whole. Then the same events as without the full
store, nothing half written anywhere."""

from __future__ import annotations

import errno
import logging
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from aviflow import api
from aviflow.k8s.settings import ClusterSettings
from aviflow.operator._controller import Controller
from aviflow.records import EventType, JobState
from aviflow.runtime.env import RUN_DIR
from aviflow.store import DATA_DIR, RunStore
from aviflow_testcluster import wait_for

from .trainjob_kit import TORCH_TEST_TIMEOUT, TORCH_WAIT, tiny

E = EventType
FULL_FOR = 60.0  # seconds
# The short job ends when the test says so (a file in its data directory, which its pod mounts
# as the host has it): after the store is full, whatever the machine's speed. (It slept 25 s
# once, and on a slow machine ended before the training job's first checkpoint.)
GO = "go"
ENDS_ON_GO = f'until [ -e "${RUN_DIR}/{DATA_DIR}/{GO}" ]; do sleep 0.2; done'
SAID_FULL = re.compile(r"the run store is full \(.*?\): (\S+)'s events and status wait")
SAID_BACK = re.compile(r"the run store takes bytes again: (\S+) recorded after (\d+) s")


def test_the_controller_says_once_that_the_store_is_full_and_once_that_it_took_bytes_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No cluster: a reconcile that meets a full store (ENOSPC) is tried again at the next
    tick, as any; it is said once per job and outage, without a traceback."""
    settings = ClusterSettings.from_dict({"image": "t:1", "runs": {"localPath": str(tmp_path)}})
    ctl = Controller(client.ApiClient(), settings, RunStore(tmp_path), workers=1, tick=0.05)
    ctl._informers = []  # nothing watched: the queue is fed by hand
    full, calls = threading.Event(), []
    full.set()

    def reconcile(key: str) -> None:
        calls.append(key)
        if full.is_set():
            raise OSError(errno.ENOSPC, "No space left on device")

    ctl.reconcile = reconcile  # type: ignore[method-assign]
    caplog.set_level(logging.INFO, "aviflow.operator")
    ctl.start()
    try:
        for n in range(1, 4):
            ctl.queue.put("team-a/job-1")
            wait_for(lambda n=n: len(calls) >= n, 10, f"reconcile {n}")
        full.clear()
        ctl.queue.put("team-a/job-1")
        wait_for(lambda: any(SAID_BACK.search(r.message) for r in caplog.records), 10, "said")
    finally:
        ctl.stop()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert [m for m in said if SAID_FULL.search(m)] == [
        "the run store is full (No space left on device): team-a/job-1's events and status "
        "wait, in order, and are tried again every tick until it takes bytes again"
    ], said
    assert len([m for m in said if SAID_BACK.search(m)]) == 1, said
    assert not [r for r in caplog.records if r.exc_info], "a full store is no traceback"


def _fill(path: Path) -> None:
    """Write ``path`` until its disk takes no more (a line's worth included)."""
    chunk = b"\0" * 65536
    with path.open("wb", buffering=0) as f:
        try:
            while f.write(chunk):
                pass
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    for _ in range(10_000):
        try:
            with path.open("ab", buffering=0) as f:
                if not f.write(b"\0"):
                    return
        except OSError:
            return


@pytest.fixture
def small_store(make_pool: Any) -> Iterator[Any]:
    """A pool (its controller not started) whose run store is a 32 MiB tmpfs of its own."""
    pool = make_pool({"default": {"gpus": 2}}, controller=False)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m,mode=0755", "tmpfs", str(pool.root)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"mounting a tmpfs needs root: {done.stderr}"
    try:
        yield pool
    finally:
        pool.stop_controller()
        subprocess.run(["umount", "--lazy", str(pool.root)], check=True)


@pytest.mark.cluster
@pytest.mark.timeout(TORCH_TEST_TIMEOUT)
def test_a_full_run_store_for_a_minute_costs_no_job_and_no_event(
    small_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    pool, disk = small_store, small_store.root
    filler = disk / "filler"
    try:
        caplog.set_level(logging.INFO, "aviflow.operator")
        pool.start_controller()
        trains = api.submit(
            tiny(
                "trains-on",
                nodes=1,
                gpus=1,
                env={"TINY_STEPS": "180", "TINY_STEP_SLEEP": "0.5", "TINY_CKPT_EVERY": "10"},
            ),
            pool.backend,
        )
        ends = api.submit(
            {
                "metadata": {"name": "ends-meanwhile"},
                "spec": {"nodes": 1, "gpusPerNode": 1,
                         "command": ["sh", "-c", ENDS_ON_GO]},
            },
            pool.backend,
        )  # fmt: skip
        wait_for(
            lambda: (
                ends.status is JobState.RUNNING and any(c.step >= 10 for c in trains.checkpoints())
            ),
            TORCH_WAIT,
            lambda: f"both running, one with a checkpoint: {trains.events()} {ends.events()}",
        )
        _fill(filler)
        filled = time.monotonic()
        step_then = max(r["step"] for r in trains.metric_rows())
        ids = sorted(pool.backend.list_ids())
        # a submission meanwhile is refused whole: nothing of it is left
        with pytest.raises(OSError) as refused:
            api.submit(tiny("refused", nodes=1, gpus=1), pool.backend)
        assert refused.value.errno == errno.ENOSPC, refused.value
        assert sorted(pool.backend.list_ids()) == ids
        # the short job ends (an empty file takes no block); its end waits in the controller,
        # which says why
        (pool.backend.store.get(ends.id).data_dir / GO).touch()
        wait_for(
            lambda: any(SAID_FULL.search(r.getMessage()) for r in caplog.records),
            60,
            "the controller says the store is full",
        )
        assert ends.status is JobState.RUNNING  # as recorded: its end could not be
        time.sleep(max(0.0, FULL_FOR - (time.monotonic() - filled)))
        assert trains.status is JobState.RUNNING, trains.events()
        filler.unlink()  # space returns
        assert ends.wait(timeout=60) is JobState.SUCCEEDED
        assert trains.wait(timeout=TORCH_WAIT) is JobState.SUCCEEDED, trains.logs(0)[-3000:]
    finally:
        filler.unlink(missing_ok=True)
        pool.stop_controller()
    said = [r.getMessage() for r in caplog.records]
    assert {m.group(1) for s in said if (m := SAID_FULL.search(s))} >= {
        f"{pool.namespace}/{ends.id}"
    }, said
    back = [m for s in said if (m := SAID_BACK.search(s)) and m.group(1).endswith(ends.id)]
    assert len(back) == 1 and int(back[0].group(2)) >= 20, said
    for job in (trains, ends):
        kinds = [e.type for e in job.events() if e.type is not E.USAGE]
        assert kinds == [E.QUEUED, E.STARTING, E.RUNNING, E.SUCCEEDED]
    # every metric row, once, in order: the rows logged while the store was full waited
    assert [r["step"] for r in trains.metric_rows()] == list(range(1, 181))
    # the checkpoints due while it was full were skipped whole: only complete ones are left
    run = pool.backend.store.get(trains.id)
    steps = [c.step for c in trains.checkpoints()]
    assert steps == [160, 170, 180], steps
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == sorted(
        run.checkpoint_dir(s).name for s in steps
    )
    # (its prints landed in the log's last page; a line that could not is counted there,
    # see tests/core/test_store_full.py)
    log = trains.logs(0)
    said_skipped = re.findall(r"aviflow: checkpoint (\d+) not saved: the run store is full", log)
    assert said_skipped and all(int(s) < 160 for s in said_skipped), log[-3000:]
    assert "done" in log
    assert step_then < 60, step_then  # it was full while the job trained
    assert [p.name for p in disk.rglob("*.tmp")] == []
