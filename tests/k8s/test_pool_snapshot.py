"""The controller's pool snapshot (``.pool.json``) read back as hostile input: every field
type-checked and bounded; anything else refuses the whole snapshot, with a log line, and a
dry run's forecast falls back to unknown (pure: a temporary run store, no cluster)."""

from __future__ import annotations

import copy
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from aviflow.estimate import UNKNOWN, Holding, QueueLimits, Waiting
from aviflow.k8s.forecast import (
    MAX_GPUS,
    MAX_JOBS,
    MAX_QUEUES,
    POOL_FILE,
    read_snapshot,
    snapshot_dict,
)

NOW = 1_700_000_000.0
LIMITS = [QueueLimits("vision", 8, "research", 4, None, False, 2.0, True), QueueLimits("nlp", 4)]
HOLDING = [Holding("ft-1", "vision", 8, (NOW + 60.0, UNKNOWN))]
WAITING = [Waiting("ft-2", "nlp", 4, (0.0, 3600.0))]
GOOD = snapshot_dict(NOW, LIMITS, HOLDING, WAITING, {"vision": "vision", "nlp": "nlp"}, True)


def changed(path: str, value: Any) -> dict[str, Any]:
    """GOOD with the field at ``path`` (``holding.0.gpus``) set to ``value``."""
    data = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    at: Any = data
    for key in parents:
        at = at[int(key)] if isinstance(at, list) else at[key]
    at[int(last) if isinstance(at, list) else last] = value
    return data


def test_the_snapshot_the_controller_writes_reads_back_exactly() -> None:
    assert read_snapshot(json.loads(json.dumps(GOOD))) == (
        NOW, LIMITS, HOLDING, WAITING, {"vision": "vision", "nlp": "nlp"}, True
    )  # fmt: skip
    empty = snapshot_dict(0, [], [], [], {}, False)
    assert read_snapshot(empty) == (0.0, [], [], [], {}, False)
    earlier = copy.deepcopy(GOOD)  # an earlier controller's, before fair-sharing weights
    for q in earlier["limits"]:  # and each queue's own reclaim (then the pool's flag says)
        del q["fairWeight"], q["reclaim"]
    assert read_snapshot(earlier)[1] == [  # type: ignore[index]
        QueueLimits("vision", 8, "research", 4, None, False), QueueLimits("nlp", 4)
    ]  # fmt: skip
    assert read_snapshot(None) is None  # no file: nothing to say, nothing logged


NAN, INF = json.loads("NaN"), json.loads("Infinity")
WHOLE = f"is not a whole number from 0 to {MAX_GPUS}"
NAME, SECS = "is not a name of 1 to 253 characters", "is not finite seconds, 0 or more"
TOP = "the snapshot is not an object of time, reclaim, queues, limits, holding, waiting"
REFUSED = [
    ([], TOP),
    ({**GOOD, "extra": 1}, TOP),
    (changed("time", NAN), f"time {SECS}"),
    (changed("time", INF), f"time {SECS}"),
    (changed("time", -1), f"time {SECS}"),
    (changed("time", "1700000000"), f"time {SECS}"),
    (changed("time", True), f"time {SECS}"),
    (changed("reclaim", 1), "reclaim is not true or false"),
    (changed("queues", ["vision"]), f"queues is not an object of at most {MAX_QUEUES}"),
    (changed("queues", {"vision": 7}), f"queues.vision {NAME}"),
    (changed("queues", {"": "vision"}), f"a queue {NAME}"),
    (changed("limits", {"name": "vision"}), f"limits is not a list of at most {MAX_QUEUES}"),
    (changed("limits", [GOOD["limits"][1]] * (MAX_QUEUES + 1)),
     f"limits is not a list of at most {MAX_QUEUES}"),
    (changed("limits.0.nominal", -8), f"limits[0].nominal {WHOLE}"),
    (changed("limits.0.nominal", 8.0), f"limits[0].nominal {WHOLE}"),
    (changed("limits.0.nominal", 1 << 40), f"limits[0].nominal {WHOLE}"),
    (changed("limits.0.nominal", False), f"limits[0].nominal {WHOLE}"),
    (changed("limits.1.lendingLimit", NAN), f"limits[1].lendingLimit {WHOLE}"),
    (changed("limits.0.cohort", "x" * 254), f"limits[0].cohort {NAME}"),
    (changed("limits.0.strict", "no"), "limits[0].strict is not true or false"),
    (changed("limits.0.fairWeight", "2"), f"limits[0].fairWeight is not null or a number from 0 to {MAX_GPUS}"),
    (changed("limits.0.fairWeight", -1.0), f"limits[0].fairWeight is not null or a number from 0 to {MAX_GPUS}"),
    (changed("limits.0.fairWeight", NAN), f"limits[0].fairWeight is not null or a number from 0 to {MAX_GPUS}"),
    (changed("limits.0.reclaim", "Any"), "limits[0].reclaim is not null, true or false"),
    (changed("limits.0.reclaim", 1), "limits[0].reclaim is not null, true or false"),
    (changed("limits.0.extra", 1), "limits[0] is not an object of name, nominal, cohort, borrowingLimit, lendingLimit, strict"),
    (changed("holding", [GOOD["holding"][0]] * (MAX_JOBS + 1)),
     f"holding is not a list of at most {MAX_JOBS}"),
    (changed("holding.0.gpus", -1), f"holding[0].gpus {WHOLE}"),
    (changed("holding.0.id", None), f"holding[0].id {NAME}"),
    (changed("holding.0.release", [NOW]), "holding[0].release is not a pair"),
    (changed("holding.0.release", {"0": NOW, "1": None}), "holding[0].release is not a pair"),
    (changed("holding.0.release.0", NAN), f"holding[0].release[0] {SECS}"),
    (changed("holding.0.release.1", INF), f"holding[0].release[1] {SECS}"),
    (changed("waiting.0.runsFor.0", -60.0), f"waiting[0].runsFor[0] {SECS}"),
    (changed("waiting.0.queue", ["nlp"]), f"waiting[0].queue {NAME}"),
    (changed("waiting.0", "ft-2"), "waiting[0] is not an object of id, queue, gpus, runsFor"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "why"), REFUSED)
def test_a_snapshot_with_a_bad_field_is_refused_as_a_whole_with_a_log_line(
    data: Any, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="aviflow.forecast"):
        assert read_snapshot(data) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"{POOL_FILE} refused ({why}): dry runs have no forecast until the next one"
    ]


def test_a_dry_runs_forecast_is_unknown_when_the_snapshot_is_refused(tmp_path: Path) -> None:
    from aviflow.backends.kubernetes import KubernetesBackend
    from aviflow.k8s.settings import ClusterSettings
    from aviflow.spec import TrainJob

    settings = ClusterSettings.from_dict({"image": "t:1", "runs": {"localPath": str(tmp_path)}})
    backend = KubernetesBackend(settings, api=object())  # reads the run store only
    job = TrainJob.from_dict({"metadata": {"name": "ft"}, "spec": {"queue": "nlp", "script": "1"}})
    fresh = snapshot_dict(time.time(), LIMITS, HOLDING, [], {"nlp": "nlp"}, True)
    (tmp_path / POOL_FILE).write_text(json.dumps(fresh))
    est = backend.forecast(job)
    assert est is not None and est.now  # the nlp queue is free
    fresh["holding"][0]["gpus"] = -8
    (tmp_path / POOL_FILE).write_text(json.dumps(fresh))
    assert backend.forecast(job) is None
