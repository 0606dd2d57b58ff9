"""Node registration and heartbeat: the fake Nodes, their status and their Leases.

The agent creates each Node (capacity, labels, taints from ``NodeSpec``), posts a Ready
status, renews its Lease in ``kube-node-lease`` every 10 s and reposts the status every
30 s.
"""

from __future__ import annotations

import os
import time

from kubernetes import client

from ._agent_common import K8S_VERSION, LEASE_SECONDS, RUNTIME, log, micro_now, now
from ._nodes import NodeSpec


class NodesMixin:
    """``Agent``'s node part; uses its ``nodes``, ``core``, ``coord``, ``args`` and
    ``stopping``."""

    def node_status(self, spec: NodeSpec) -> dict:
        cond = lambda t, s, reason, msg: {  # noqa: E731
            "type": t,
            "status": s,
            "reason": reason,
            "message": msg,
            "lastHeartbeatTime": now(),
            "lastTransitionTime": self.started,
        }
        return {
            "capacity": spec.capacity,
            "allocatable": spec.capacity,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "ok"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "ok"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "ok"),
                cond("Ready", "True", "KubeletReady", "aviflow node agent is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": spec.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.args.kubelet_port}},
            "nodeInfo": {
                "machineID": spec.name,
                "systemUUID": spec.name,
                "bootID": self.args.cluster_id,
                "kernelVersion": os.uname().release,
                "osImage": "aviflow fake node",
                "containerRuntimeVersion": RUNTIME,
                "kubeletVersion": K8S_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def register_nodes(self) -> None:
        self.started = now()
        for spec in self.nodes.values():
            try:
                self.core.create_node(spec.to_node())
            except client.ApiException as e:
                if e.status != 409:
                    raise
            self.core.patch_node_status(spec.name, {"status": self.node_status(spec)})
            node = self.core.read_node(spec.name)
            self.node_uids = getattr(self, "node_uids", {})
            self.node_uids[spec.name] = node.metadata.uid

    def heartbeat_loop(self) -> None:
        last_status = 0.0
        while not self.stopping.is_set():
            for spec in self.nodes.values():
                try:
                    self._renew_lease(spec.name)
                    if time.monotonic() - last_status > 30:
                        self.core.patch_node_status(spec.name, {"status": self.node_status(spec)})
                except Exception as e:  # keep beating through transient errors
                    log.warning("heartbeat for %s failed: %s", spec.name, e)
            if time.monotonic() - last_status > 30:
                last_status = time.monotonic()
            self.stopping.wait(10)

    def _renew_lease(self, node: str) -> None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": node,
                "namespace": "kube-node-lease",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": node, "uid": self.node_uids[node]}
                ],
            },
            "spec": {
                "holderIdentity": node,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": micro_now(),
            },
        }
        try:
            self.coord.patch_namespaced_lease(
                node, "kube-node-lease", {"spec": {"renewTime": micro_now()}}
            )
        except client.ApiException as e:
            if e.status != 404:
                raise
            self.coord.create_namespaced_lease("kube-node-lease", body)
