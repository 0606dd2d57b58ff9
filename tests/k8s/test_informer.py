"""The informer's index: what ``by(value)`` returns follows every add, change and delete
(the cluster tests exercise list+watch itself on a real API server)."""

from __future__ import annotations

from typing import Any

from aviflow.operator._informer import Informer


def pod(name: str, job: str | None) -> dict[str, Any]:
    labels = {"aviflow.dev/job": job} if job else {}
    return {"metadata": {"namespace": "ns", "name": name, "labels": labels}}


def by_job(obj: dict[str, Any]) -> list[str]:
    job = obj["metadata"]["labels"].get("aviflow.dev/job")
    return [job] if job else []


def names(objs: list[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objs)


def test_the_index_follows_adds_changes_and_deletes() -> None:
    inf = Informer("pods", lambda **_: None, lambda _: None, index=by_job)
    inf._put(("ns", "a-0"), pod("a-0", "a"))
    inf._put(("ns", "a-1"), pod("a-1", "a"))
    inf._put(("ns", "b-0"), pod("b-0", "b"))
    inf._put(("ns", "x"), pod("x", None))
    assert (names(inf.by("a")), names(inf.by("b")), inf.by("c")) == (["a-0", "a-1"], ["b-0"], [])
    inf._put(("ns", "a-1"), pod("a-1", "b"))  # relabelled: moves from a to b
    assert (names(inf.by("a")), names(inf.by("b"))) == (["a-0"], ["a-1", "b-0"])
    inf._put(("ns", "a-0"), None)
    assert inf.by("a") == [] and "a" not in inf._by
    assert names(inf.items()) == ["a-1", "b-0", "x"]
