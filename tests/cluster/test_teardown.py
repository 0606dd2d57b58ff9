"""A cluster of its own, stopped mid-flight: nothing may outlive ``Cluster.stop()``."""

from __future__ import annotations

import json
import socket
import textwrap
import time

import pytest

from aviflow_testcluster import Cluster, _cluster, _procs

pytestmark = pytest.mark.cluster

# A pod whose process escapes its process group (setsid + double fork), the
# hardest case for a process-group kill; the marker sweep must still find it.
ESCAPE = textwrap.dedent("""
    import os, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            open(os.environ["OUT"], "w").write(str(os.getpid()))
            while True:
                time.sleep(1)
        os._exit(0)
    while True:
        time.sleep(1)
""")


def test_stop_leaves_no_process(tmp_path, k8s_cluster, monkeypatch):
    # k8s_cluster guarantees the binaries exist; this test starts a second, small cluster.
    # Its first try loses Kueue's visibility port to a socket held here, as it can lose it to
    # any process between free_ports() and Kueue's own bind: start() must try again with
    # fresh ports, and the first try must leave no process behind.
    taken = socket.create_server(("127.0.0.1", 0))
    held = taken.getsockname()[1]
    tries: list[dict[str, int]] = []
    real_free_ports = _cluster.free_ports

    def free_ports(n: int) -> list[int]:
        ports = real_free_ports(n)
        if not tries:
            ports[_cluster.PORT_NAMES.index("kueue-visibility")] = held
        tries.append(dict(zip(_cluster.PORT_NAMES, ports, strict=True)))
        return ports

    ids: list[str] = []
    real_claim = _cluster._claim_ip_block
    monkeypatch.setattr(_cluster, "free_ports", free_ports)
    monkeypatch.setattr(
        _cluster, "_claim_ip_block", lambda root, cid: ids.append(cid) or real_claim(root, cid)
    )
    said: list[str] = []
    try:
        cluster = Cluster.start(
            tmp_path / "c",
            hgx_nodes=1,
            cpu_nodes=1,
            die_with_parent=True,
            log=said.append,
            host_mode=True,
        )
    finally:
        taken.close()
    assert [t["kueue-visibility"] == held for t in tries] == [True, False]
    assert cluster.ports == tries[1]
    assert "kueue lost its port to another process; starting again with fresh ports" in said
    assert len(ids) == 2 and ids[1] == cluster.id
    assert _procs.marked_pids(ids[0], prefix=True) == []
    try:
        out = tmp_path / "escaped.pid"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "escaper"},
            "spec": {
                "nodeSelector": {"aviflow.dev/node-pool": "cpu"},
                "containers": [
                    {
                        "name": "main",
                        "image": "ignored",
                        "command": ["python", "-c", ESCAPE],
                        "env": [{"name": "OUT", "value": str(out)}],
                    }
                ],
            },
        }
        cluster.kubectl("apply", "-n", "default", "-f", "-", input=json.dumps(pod))
        deadline = time.monotonic() + 60
        while not (out.exists() and out.read_text()):
            assert time.monotonic() < deadline, "pod never started"
            time.sleep(0.2)
        escaped = int(out.read_text())
        assert escaped in cluster.processes()
        components = dict(cluster.pids)
        assert len(components) == 6
    finally:
        cluster.stop()
    assert cluster.processes() == []
    for pid in [escaped, *components.values()]:
        assert not _procs.alive(pid), f"pid {pid} still running"
