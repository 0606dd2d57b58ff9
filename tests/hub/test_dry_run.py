"""Will it fit, before submitting: aviflow-api's ``POST jobs?dryRun=true`` and the notebook's
client (``HubBackend.forecast``, behind the magic's ``--dry-run``), behind a real JupyterHub
on the local backend (1 GPU slot; team-a's queue has a quota of 4): the answer for the queue
the submission would go to, the same refusals as a submission, nothing created."""

from __future__ import annotations

import os
from typing import Any

import pytest

from aviflow.backends.hub import HubBackend
from aviflow.spec import TrainJob

pytestmark = pytest.mark.timeout(600)


def _spec(gpus: int, **more: Any) -> dict[str, Any]:
    return {"metadata": {"name": "fit"},
            "spec": {"scriptFile": "train.py", "gpusPerNode": gpus, **more}}  # fmt: skip


def test_a_dry_run_says_when_it_would_start_and_creates_nothing(hub_factory: Any) -> None:
    hub = hub_factory()
    alice, bob = hub.token("alice"), hub.token("bob")
    # the code is not needed for a dry run (a submission of this spec needs train.py's text)
    fits = hub.call("POST", "jobs?dryRun=true", alice, json={"spec": _spec(1)})
    assert fits.status_code == 200, fits.text
    body = fits.json()
    start = body.pop("expectedStart")
    assert body == {"dryRun": True, "queue": "queue-a", "team": "team-a"}
    assert start["now"] is True and start["low"] == start["high"] and "never" not in start
    never = hub.call("POST", "jobs?dryRun=true", alice, json={"spec": _spec(2)}).json()
    assert never["expectedStart"]["never"] == "needs 2 GPUs; the pool has 1"
    assert (never["expectedStart"]["low"], never["expectedStart"]["high"]) == (None, None)

    # refused as the submission would be: another team's queue, a bad spec, a bad flag
    other = {"metadata": {"name": "x"}, "spec": {"script": "print(1)", "queue": "queue-a"}}
    theirs = hub.call("POST", "jobs?dryRun=true", bob, json={"spec": other})
    real = hub.call("POST", "jobs", bob, json={"spec": other})
    assert theirs.status_code == real.status_code == 403 and theirs.json() == real.json()
    bad = hub.call("POST", "jobs?dryRun=true", alice, json={"spec": _spec(0)})
    assert (bad.status_code, bad.json()["error"]) == (400, "SpecError")
    flag = hub.call("POST", "jobs?dryRun=yes", alice, json={"spec": _spec(1)})
    assert (flag.status_code, flag.json()["message"]) == (
        400,
        "dryRun must be one of true, false, got 'yes'",
    )

    # the notebook's client asks the same
    client = HubBackend(f"{hub.url}/services/aviflow-api/", token=alice)
    job = TrainJob.from_dict({"metadata": {"name": "fit"}, "spec": {"script": "print(1)"}})
    found = client.forecast(job)
    assert found is not None and found.now and found.never is None
    # nothing was created: no job for anyone, nothing in the run store
    assert hub.call("GET", "jobs", alice).json() == {"jobs": []}
    assert not hub.run_root.exists() or not [
        n for n in os.listdir(hub.run_root) if not n.startswith(".") and n != "queues.json"
    ]
