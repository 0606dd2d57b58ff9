"""The informer: its index follows every add, change and delete; on a real API server, it
lists in pages and resyncs from its cache (the TrainJob tests exercise list+watch further)."""

from __future__ import annotations

from typing import Any

import pytest

from aviflow.operator._informer import Informer, RawWatch
from aviflow_testcluster import wait_for
from aviflow_testcluster._agent_common import RawWatch as AgentRawWatch


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


@pytest.mark.parametrize("raw", [RawWatch, AgentRawWatch], ids=["controller", "node-agent"])
def test_a_watch_hands_over_the_servers_json_not_the_clients_models(raw: type) -> None:
    """The client's own watch decodes each object into its models as well (by the type its
    list method's docstring names), which the informer (and the test cluster's node agent)
    never reads; ``RawWatch`` does not, and an error event still raises (410: relist)."""
    import json

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.watch import Watch

    pod = {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7"},
           "spec": {"containers": [{"name": "c", "image": "i"}]}}  # fmt: skip
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    lines = [{"type": "ADDED", "object": pod}, {"type": "ERROR", "object": gone}]

    class Answer:
        status = 200

        def stream(self, amt: Any = None, decode_content: bool = False) -> Any:
            for ev in lines:
                yield (json.dumps(ev) + "\n").encode()

        def close(self) -> None: ...
        def release_conn(self) -> None: ...

    def list_pods(**kw: Any) -> Answer:
        """:rtype: V1PodList"""
        return Answer()

    assert isinstance(next(Watch().stream(list_pods, timeout_seconds=1))["object"], client.V1Pod)
    events = raw().stream(list_pods, timeout_seconds=1)
    first = next(events)
    assert (first["type"], first["object"], first["raw_object"]) == ("ADDED", pod, pod)
    with pytest.raises(ApiException) as err:
        next(events)
    assert err.value.status == 410


@pytest.mark.cluster
def test_lists_come_in_pages_and_a_resync_comes_from_the_cache(
    k8s_cluster: Any, k8s_namespace: str
) -> None:
    from kubernetes import client

    api = k8s_cluster.api_client()
    core = client.CoreV1Api(api)
    for i in range(7):
        core.create_namespaced_config_map(
            k8s_namespace, {"metadata": {"name": f"cm-{i}", "labels": {"t": "x"}}}
        )
    lists: list[dict[str, Any]] = []  # the requests that were lists (not watches)
    seen: list[str] = []

    def list_call(**kw: Any) -> Any:
        if not kw.get("watch"):
            lists.append({k: kw.get(k) for k in ("limit", "_continue")})
        return core.list_namespaced_config_map(**kw)

    inf = Informer(
        "configmaps",
        list_call,
        lambda obj: seen.append(obj["metadata"]["name"]),
        resync=1.0,
        page_size=3,
        namespace=k8s_namespace,
        label_selector="t=x",
    )
    inf.start()
    try:
        assert inf.wait_synced(30)
        assert names(inf.items()) == [f"cm-{i}" for i in range(7)]
        assert [page["limit"] for page in lists] == [3, 3, 3]  # 3 + 3 + 1
        assert lists[0]["_continue"] is None and all(page["_continue"] for page in lists[1:])
        wait_for(lambda: len(seen) >= 3 * 7, 15, "two resyncs")  # every object, again and again
        core.create_namespaced_config_map(
            k8s_namespace, {"metadata": {"name": "cm-7", "labels": {"t": "x"}}}
        )
        wait_for(lambda: inf.get(k8s_namespace, "cm-7"), 15, "the watch's new object")
        assert len(lists) == 3  # not one list more: resyncs replay the cache, the watch goes on
    finally:
        inf.stop()
        api.close()


def test_a_transform_and_a_resync_key_keep_history_out_of_the_cache_and_the_resync() -> None:
    import json

    from aviflow.operator._cell import ACTIVE, activity, trim

    def trainjob(name: str, state: str | None) -> dict[str, Any]:
        return {
            "metadata": {"namespace": "ns", "name": name, "uid": f"u-{name}",
                         "annotations": {"aviflow.dev/submission": f"t-{name}"},
                         "managedFields": [{"manager": "x", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"queue": "q", "command": ["true"]},
            "status": {"state": state, "failure": {"traceback": "Traceback..."}} if state else {},
        }  # fmt: skip

    objs = [trainjob(f"done-{i}", s) for i, s in enumerate(["SUCCEEDED", "FAILED", "CANCELLED"])]
    objs += [trainjob("running", "RUNNING"), trainjob("new", None)]

    class Page:
        def __init__(self, data: dict[str, Any]) -> None:
            self.data = json.dumps(data).encode()

    def list_call(limit: int, _continue: str | None = None, **_: Any) -> Page:
        start = int(_continue or 0)
        more = start + limit < len(objs)
        meta = {"resourceVersion": "7", **({"continue": str(start + limit)} if more else {})}
        return Page({"metadata": meta, "items": objs[start : start + limit]})

    seen: list[dict[str, Any]] = []
    inf = Informer(
        "trainjobs", list_call, seen.append, page_size=2, index=activity, transform=trim,
        resync_key=ACTIVE,
    )  # fmt: skip
    assert inf._relist() == "7"
    done = inf.get("ns", "done-1")
    assert done == {
        "metadata": {"namespace": "ns", "name": "done-1", "uid": "u-done-1",
                     "annotations": {"aviflow.dev/submission": "t-done-1"}},
        "status": {"state": "FAILED"},
    }  # fmt: skip
    running = inf.get("ns", "running")
    assert running is not None and "managedFields" not in running["metadata"]
    assert running["spec"] == objs[3]["spec"] and running["status"] == objs[3]["status"]
    assert seen[1] == done  # on_change is handed what the cache keeps
    assert names(inf.by(ACTIVE)) == ["new", "running"]
    seen.clear()
    inf._replay()  # a resync hands back the TrainJobs not finished, not the history
    assert names(seen) == ["new", "running"]
    inf._put(("ns", "running"), trim(trainjob("running", "SUCCEEDED")))  # it ends
    seen.clear()
    inf._replay()
    assert names(seen) == ["new"]
    with pytest.raises(ValueError, match="give an index"):
        Informer("x", list_call, seen.append, resync_key=ACTIVE)
