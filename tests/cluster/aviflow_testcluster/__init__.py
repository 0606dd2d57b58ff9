"""A real Kubernetes control plane with Kueue and fake HGX nodes, for tests.

Built from pinned Go modules (see ``tests/cluster/README.md``); pods on the fake
nodes run as local processes under the node agent.

>>> from aviflow_testcluster import Cluster                 # doctest: +SKIP
>>> c = Cluster.start(Path("/tmp/c"))                       # doctest: +SKIP
>>> c.kubectl("get", "nodes").stdout                        # doctest: +SKIP
>>> c.stop()                                                # doctest: +SKIP
"""

from ._build import BINARIES, K8S_VERSION, KUEUE_VERSION, bin_dir, build
from ._cluster import RESTRICTED, Cluster
from ._nodes import (
    GPU_RESOURCE,
    GPU_TAINT,
    GPU_TOLERATION,
    LABEL_BLOCK,
    LABEL_INSTANCE_TYPE,
    LABEL_POOL,
    LABEL_RACK,
    NodeSpec,
    cpu_node,
    default_nodes,
    hgx_node,
)
from ._plumbing import ClusterError, free_port, free_ports
from ._wait import wait_for

__all__ = [
    "BINARIES",
    "GPU_RESOURCE",
    "GPU_TAINT",
    "GPU_TOLERATION",
    "K8S_VERSION",
    "KUEUE_VERSION",
    "LABEL_BLOCK",
    "LABEL_INSTANCE_TYPE",
    "LABEL_POOL",
    "LABEL_RACK",
    "RESTRICTED",
    "Cluster",
    "ClusterError",
    "NodeSpec",
    "bin_dir",
    "build",
    "cpu_node",
    "default_nodes",
    "free_port",
    "free_ports",
    "hgx_node",
    "wait_for",
]
