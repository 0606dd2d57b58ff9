"""Admission of queued local jobs (pure): machine slots, per-queue quotas, FIFO."""

from __future__ import annotations

import pytest

from aviflow.backends._admission import Verdict, Waiting, decide

A1, A2, B1 = Waiting("a1", "a", 2), Waiting("a2", "a", 2), Waiting("b1", "b", 4)


@pytest.mark.parametrize(
    ("job", "waiting", "in_use", "capacity", "quotas", "expected"),
    [
        # no quota anywhere: plain FIFO over the machine's slots
        ("a1", [A1], {}, 8, {}, Verdict(True, 1, "starting")),
        (
            "a1",
            [A1],
            {"x": 7},
            8,
            {},
            Verdict(False, 1, "waiting for 2 GPU slots (7/8 in use, position 1)"),
        ),
        # strict FIFO within a queue, even when the later job would fit
        (
            "a2",
            [A1, A2],
            {},
            8,
            {},
            Verdict(False, 2, "waiting behind 1 earlier job(s) of queue 'a' (position 2)"),
        ),
        # a queue at its quota holds its own jobs back...
        (
            "a1",
            [A1, B1],
            {"a": 2},
            8,
            {"a": 2},
            Verdict(False, 1, "waiting for queue 'a' quota: needs 2 GPUs, 2/2 in use (position 1)"),
        ),
        # ...but not another queue's
        ("b1", [A1, B1], {"a": 2}, 8, {"a": 2}, Verdict(True, 2, "starting")),
        # across queues the oldest admissible job goes first, also when the machine is full
        (
            "b1",
            [A1, B1],
            {},
            8,
            {"a": 2},
            Verdict(False, 2, "waiting for 4 GPU slots (0/8 in use, position 2)"),
        ),
        (
            "b1",
            [A1, B1],
            {"b": 0, "x": 6},
            8,
            {},
            Verdict(False, 2, "waiting for 4 GPU slots (6/8 in use, position 2)"),
        ),
        # a quota of 0 closes the queue
        (
            "b1",
            [B1],
            {},
            8,
            {"b": 0},
            Verdict(False, 1, "waiting for queue 'b' quota: needs 4 GPUs, 0/0 in use (position 1)"),
        ),
        ("zz", [A1], {}, 8, {}, Verdict(False, None, "not queued")),
    ],
)
def test_decide(job, waiting, in_use, capacity, quotas, expected):
    assert decide(job, waiting, in_use, capacity, quotas) == expected
