"""A cluster of its own, stopped mid-flight: nothing may outlive ``Cluster.stop()``."""

from __future__ import annotations

import json
import textwrap
import time

import pytest

from aviflow_testcluster import Cluster, _procs

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


def test_stop_leaves_no_process(tmp_path, k8s_cluster):
    # k8s_cluster guarantees the binaries exist; this test starts a second, small cluster.
    cluster = Cluster.start(tmp_path / "c", hgx_nodes=1, cpu_nodes=1, die_with_parent=True)
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
