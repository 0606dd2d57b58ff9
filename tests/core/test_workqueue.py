"""The controller's work queue (issue 28): two lanes, urgent ids (new submissions) handed out
first, FIFO inside each; an id is never handed out twice at once. No cluster, no threads
but the test's own."""

from __future__ import annotations

import threading

from aviflow.operator._workqueue import WorkQueue


def _drain(q: WorkQueue) -> list[str]:
    taken = []
    while q.waiting:
        job_id = q.take()
        assert job_id is not None
        taken.append(job_id)
        q.done(job_id)
    return taken


def test_urgent_ids_go_first_each_lane_in_the_order_put() -> None:
    q = WorkQueue()
    for job_id, urgent in (("a", False), ("b", False), ("n1", True), ("c", False), ("n2", True)):
        q.put(job_id, urgent=urgent)
    assert q.waiting == ["n1", "n2", "a", "b", "c"]
    assert _drain(q) == ["n1", "n2", "a", "b", "c"]


def test_an_id_put_again_keeps_its_place_and_moves_up_when_put_urgent() -> None:
    q = WorkQueue()
    for job_id in ("a", "b", "c"):
        q.put(job_id)
    q.put("a")  # again in its lane: keeps its place
    q.put("u", urgent=True)
    q.put("u", urgent=True)
    q.put("c", urgent=True)  # from the normal lane to the end of the urgent one
    q.put("c")  # a normal put of an urgent id leaves it urgent
    q.put("u")
    assert q.waiting == ["u", "c", "a", "b"]
    assert _drain(q) == ["u", "c", "a", "b"]


def test_an_id_put_while_busy_comes_back_once_done_urgent_if_one_put_was() -> None:
    q = WorkQueue()
    q.put("a", urgent=True)
    q.put("b", urgent=True)
    assert q.take() == "a"
    assert q.take() == "b"
    q.put("x")
    q.put("a")
    q.put("a", urgent=True)
    q.put("a")  # a later normal put does not take the urgency back
    q.put("b")
    q.put("b")
    assert q.waiting == ["x"]  # the busy ones wait for their reconciles to end
    q.done("b")
    q.done("a")
    assert q.waiting == ["a", "x", "b"]
    assert _drain(q) == ["a", "x", "b"]
    q.done("b")  # done again: nothing was put meanwhile, nothing comes back
    assert q.waiting == []


def test_a_busy_id_is_not_handed_out_twice_and_close_ends_every_take() -> None:
    q = WorkQueue()
    q.put("a", urgent=True)
    assert q.take() == "a"
    q.put("a", urgent=True)
    assert q.waiting == [] and q.longest_busy() is not None
    taken: list[str | None] = []
    waiter = threading.Thread(target=lambda: taken.append(q.take()))
    waiter.start()
    q.done("a")  # now it is handed out, to the waiting worker
    waiter.join(10)
    assert taken == ["a"] and q.waiting == []
    waiters = [threading.Thread(target=lambda: taken.append(q.take())) for _ in range(2)]
    for t in waiters:
        t.start()
    q.close()
    for t in waiters:
        t.join(10)
    assert taken == ["a", None, None]
    q.put("b", urgent=True)
    assert q.take() is None  # closed: nothing more is handed out
