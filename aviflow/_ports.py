"""Free loopback ports that are unlikely to be taken before their user binds them.

A port found free by binding port 0 comes from the kernel's ephemeral range, the same range
it hands to every outgoing connection, so it can be gone by the time the process it was
picked for (accelerate's rendezvous, a test cluster's component) binds it. Ports from below
that range can only be lost to another explicit bind. Nor does it hand out the range a
TrainJob's rank 0 takes for its rendezvous (:data:`RENDEZVOUS`).
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 10000
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# The ports a TrainJob attempt's rank 0 listens on for its rendezvous (one derived from the
# job and attempt: aviflow.k8s.manifests.main_port). Pods that share a host's network
# (hostNetwork HGX nodes; the test cluster's pods, processes of its host) meet there
# whatever else the host runs, and accelerate refuses to start node 0 when its port answers
# on localhost: the test cluster's etcd, on a free port of 28675, failed such an attempt.
RENDEZVOUS = range(20000, 30000)


def ephemeral_range(path: Path = _RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        low, high = path.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def spans(high: int) -> list[range]:
    """The ports :func:`free_ports` draws from: :data:`LOWEST` to ``high``, less
    :data:`RENDEZVOUS`.

    >>> spans(32767)
    [range(10000, 20000), range(30000, 32768)]
    >>> spans(15000), spans(29999)
    ([range(10000, 15001)], [range(10000, 20000)])
    """
    below = range(LOWEST, min(high + 1, RENDEZVOUS.start))
    above = range(max(LOWEST, RENDEZVOUS.stop), high + 1)
    return [r for r in (below, above) if len(r)]


def _draw(rng: random.Random, among: list[range]) -> int:
    """A port drawn evenly from ``among``."""
    i = rng.randrange(sum(len(r) for r in among))
    for r in among:
        if i < len(r):
            return r[i]
        i -= len(r)
    raise AssertionError("unreachable")


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports free on ``host`` now, below the ephemeral range and outside
    :data:`RENDEZVOUS` where that leaves room (else from the kernel). Raises ``OSError``
    when it cannot find ``n``."""
    among = spans(ephemeral_range()[0] - 1)
    roomy = sum(len(r) for r in among) >= 10 * n
    rng = random.SystemRandom()
    ports: list[int] = []
    for _ in range(200 * n):
        if len(ports) == n:
            break
        with socket.socket() as s:
            try:
                s.bind((host, _draw(rng, among) if roomy else 0))
            except OSError:
                continue
            port = int(s.getsockname()[1])
        if port not in ports:
            ports.append(port)
    if len(ports) < n:
        raise OSError(f"found only {len(ports)} free ports of {n} on {host}")
    return ports


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]
