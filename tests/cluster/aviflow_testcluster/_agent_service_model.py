"""What a Service means to the node agent: the parts of ``_agent_services`` that do not
hold state, so they can be tested without a cluster (``test_agent_units.py``).

``Service`` (the parts of a Service object the agent uses, and ``address``, the loopback
address the agent gave it), ``Endpoint`` (a ready pod, from ``ready_endpoints``),
``service_targets`` (what the endpoints controller and kube-proxy derive: each TCP port's
``<podIP>:<targetPort>`` list), ``hosts_line`` (its ``/etc/hosts`` record), ``link_env``
(the kubelet's variables), and ``listening_sockets`` + ``serving`` (which endpoints have a
server yet).
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._agent import Agent

Target = tuple[str, int]  # (pod IP, target port)
APISERVER = ("default", "kubernetes")
WILDCARD = "*"


@dataclass(frozen=True)
class ServicePort:
    """One entry of ``spec.ports`` (``targetPort`` defaults to ``port``, as the API does)."""

    name: str
    port: int
    target: int | str  # a number, or the name of a container port
    protocol: str


@dataclass(frozen=True)
class Service:
    """What the agent needs of a Service object (``address``: ours, "" if not routed)."""

    uid: str
    namespace: str
    name: str
    type: str
    selector: dict[str, str]
    ports: tuple[ServicePort, ...]
    cluster_ip: str
    lb_class: str
    ingress_ips: tuple[str, ...]
    address: str = ""

    @classmethod
    def from_json(cls, obj: dict) -> Service:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        return cls(
            uid=meta["uid"],
            namespace=meta["namespace"],
            name=meta["name"],
            type=spec.get("type", "ClusterIP"),
            selector=dict(spec.get("selector") or {}),
            ports=tuple(
                ServicePort(
                    name=p.get("name", ""),
                    port=int(p["port"]),
                    target=p.get("targetPort", p["port"]),
                    protocol=p.get("protocol", "TCP"),
                )
                for p in spec.get("ports") or []
            ),
            cluster_ip=spec.get("clusterIP") or "",
            lb_class=spec.get("loadBalancerClass") or "",
            ingress_ips=tuple(i["ip"] for i in ingress if i.get("ip")),
        )

    @property
    def routed(self) -> bool:
        """Whether kube-proxy would route it: a cluster IP, and endpoints to route to."""
        if self.cluster_ip in ("", "None") or self.type == "ExternalName":
            return False
        return bool(self.selector) or (self.namespace, self.name) == APISERVER

    def wants_ingress(self) -> bool:
        """A cloud controller provisions LoadBalancers that name no other controller."""
        return self.type == "LoadBalancer" and not self.lb_class and bool(self.address)


@dataclass(frozen=True)
class Endpoint:
    """A pod that can serve: its labels, address and declared container ports."""

    namespace: str
    labels: dict[str, str]
    ip: str
    ports: dict[tuple[str, str], int]  # (port name, protocol) -> containerPort

    def target(self, sp: ServicePort) -> int | None:
        if isinstance(sp.target, int):
            return sp.target
        if sp.target.isdigit():
            return int(sp.target)
        return self.ports.get((sp.target, sp.protocol))


def ready_endpoints(agent: Agent) -> list[Endpoint]:
    """The agent's pods that an endpoints controller would list as ready."""
    with agent.lock:
        runners = list(agent.pods.values())
    out = []
    for r in runners:
        ready = r.conditions.get("Ready", {}).get("status") == "True"
        if not (r.ip and ready) or r.finished or r.deleting.is_set():
            continue
        spec = r.pod["spec"]
        containers = spec["containers"] + [
            c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"
        ]
        ports = {
            (p["name"], p.get("protocol", "TCP")): int(p["containerPort"])
            for c in containers
            for p in c.get("ports") or []
            if p.get("name")
        }
        labels = dict(r.pod["metadata"].get("labels") or {})
        out.append(Endpoint(r.namespace, labels, r.ip, ports))
    return out


def service_targets(
    svc: Service, endpoints: Iterable[Endpoint], apiserver_port: int
) -> dict[int, list[Target]]:
    """Each TCP port of ``svc`` -> the ``(ip, port)`` its connections may go to."""
    tcp = [sp for sp in svc.ports if sp.protocol == "TCP"]
    if (svc.namespace, svc.name) == APISERVER:
        return {sp.port: [("127.0.0.1", apiserver_port)] for sp in tcp}
    members = [
        e
        for e in endpoints
        if e.namespace == svc.namespace
        and all(e.labels.get(k) == v for k, v in svc.selector.items())
    ]
    out: dict[int, list[Target]] = {}
    for sp in tcp:
        out[sp.port] = [(e.ip, t) for e in members if (t := e.target(sp)) is not None]
    return out


def hosts_line(svc: Service, namespace: str) -> str:
    """The ``/etc/hosts`` record of ``svc`` for a pod in ``namespace``."""
    fq = f"{svc.name}.{svc.namespace}"
    names = f"{fq}.svc.cluster.local {fq}.svc {fq}"
    if svc.namespace == namespace:
        names += f" {svc.name}"
    return f"{svc.address}\t{names}"


def link_env(svc: Service) -> dict[str, str]:
    """The kubelet's variables for one Service (``pkg/kubelet/envvars/envvars.go``
    ``FromServices``), with the agent's address as the host."""
    if not svc.ports:
        return {}
    prefix = svc.name.upper().replace("-", "_")
    first = svc.ports[0]
    env = {f"{prefix}_SERVICE_HOST": svc.address, f"{prefix}_SERVICE_PORT": str(first.port)}
    for sp in svc.ports:
        if sp.name:
            env[f"{prefix}_SERVICE_PORT_{sp.name.upper().replace('-', '_')}"] = str(sp.port)
    for i, sp in enumerate(svc.ports):
        proto = sp.protocol.lower()
        url = f"{proto}://{svc.address}:{sp.port}"
        if i == 0:
            env[f"{prefix}_PORT"] = url
        pp = f"{prefix}_PORT_{sp.port}_{sp.protocol.upper()}"
        env.update(
            {pp: url, f"{pp}_PROTO": proto, f"{pp}_PORT": str(sp.port), f"{pp}_ADDR": svc.address}
        )
    return env


def listening_sockets(proc_net: Path = Path("/proc/net")) -> set[tuple[str, int]]:
    """``(address, port)`` of every TCP socket listening in this network namespace, from the
    kernel's table (``tcp`` and ``tcp6``); ``"*"`` for one bound to ``0.0.0.0`` or ``::``
    (a v4-mapped address counts as its IPv4 address)."""
    out = set()
    for name in ("tcp", "tcp6"):
        try:
            rows = (proc_net / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                address, port = fields[1].split(":")
                out.add((_kernel_address(address), int(port, 16)))
    return out


def _kernel_address(hexed: str) -> str:
    """An address as ``/proc/net/tcp*`` prints it: 32-bit words in host byte order."""
    raw = b"".join(
        int(hexed[i : i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(hexed), 8)
    )
    ip = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return WILDCARD if ip.is_unspecified else str(ip)


def serving(target: Target, sockets: set[tuple[str, int]]) -> bool:
    """Whether a connection to ``target`` would reach a server now (one bound to the pod IP,
    or to every address). Until one does, a connection through kube-proxy is refused by the
    pod; the agent instead does not list the endpoint, so the Service port stays closed and
    the connection is refused all the same. This keeps its listener off the port until the
    pod's server holds it: a server that binds ``0.0.0.0:<port>`` after the agent bound
    ``<service address>:<port>`` would fail with EADDRINUSE."""
    ip, port = target
    return (ip, port) in sockets or (WILDCARD, port) in sockets
