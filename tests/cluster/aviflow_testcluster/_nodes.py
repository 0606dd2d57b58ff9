"""Fake node specifications: HGX GPU nodes and CPU nodes for notebooks.

Built purely as dicts (Node objects without status); the node agent registers
them and keeps their status and leases fresh.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}

LABEL_POOL = "aviflow.dev/node-pool"
LABEL_BLOCK = "topology.aviflow.dev/block"
LABEL_RACK = "topology.aviflow.dev/rack"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_AGENT = "aviflow.dev/fake-node"

HGX_INSTANCE_TYPE = "hgx-h100-8"
CPU_INSTANCE_TYPE = "cpu-32"


@dataclass(frozen=True)
class NodeSpec:
    name: str
    labels: dict[str, str]
    capacity: dict[str, str]
    taints: list[dict[str, str]] = field(default_factory=list)

    def to_node(self) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": dict(self.labels)},
            "spec": {"taints": [dict(t) for t in self.taints]},
        }

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "labels": self.labels,
            "capacity": self.capacity,
            "taints": self.taints,
        }

    @classmethod
    def from_json(cls, d: dict) -> NodeSpec:
        return cls(d["name"], dict(d["labels"]), dict(d["capacity"]), list(d.get("taints", [])))


def hgx_node(index: int, *, racks_per_block: int = 2, nodes_per_rack: int = 2) -> NodeSpec:
    """An 8-GPU HGX node; nodes fill racks, racks fill blocks (for topology tests)."""
    name = f"hgx-{index}"
    rack = index // nodes_per_rack
    block = rack // racks_per_block
    return NodeSpec(
        name=name,
        labels={
            LABEL_HOSTNAME: name,
            LABEL_INSTANCE_TYPE: HGX_INSTANCE_TYPE,
            LABEL_POOL: "hgx",
            LABEL_BLOCK: f"block-{block}",
            LABEL_RACK: f"rack-{rack}",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": "8",
            LABEL_AGENT: "true",
        },
        capacity={
            "cpu": "192",
            "memory": "2Ti",
            "ephemeral-storage": "20Ti",
            "pods": "110",
            GPU_RESOURCE: "8",
        },
        taints=[dict(GPU_TAINT)],
    )


def cpu_node(index: int) -> NodeSpec:
    name = f"cpu-{index}"
    return NodeSpec(
        name=name,
        labels={
            LABEL_HOSTNAME: name,
            LABEL_INSTANCE_TYPE: CPU_INSTANCE_TYPE,
            LABEL_POOL: "cpu",
            LABEL_AGENT: "true",
        },
        capacity={"cpu": "32", "memory": "128Gi", "ephemeral-storage": "1Ti", "pods": "110"},
    )


def default_nodes(hgx: int = 4, cpu: int = 2) -> list[NodeSpec]:
    return [hgx_node(i) for i in range(hgx)] + [cpu_node(i) for i in range(cpu)]
