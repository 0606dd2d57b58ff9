"""Free loopback ports that are unlikely to be taken before their user binds them.

A port found free by binding port 0 comes from the kernel's ephemeral range, the same range
it hands to every outgoing connection, so it can be gone by the time the process it was
picked for (accelerate's rendezvous, a test cluster's component) binds it. Ports from below
that range can only be lost to another explicit bind.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 10000
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range(path: Path = _RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        low, high = path.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports free on ``host`` now, below the ephemeral range where it leaves
    room (else from the kernel). Raises ``OSError`` when it cannot find ``n``."""
    high = ephemeral_range()[0] - 1
    roomy = high - LOWEST >= 10 * n
    rng = random.SystemRandom()
    ports: list[int] = []
    for _ in range(200 * n):
        if len(ports) == n:
            break
        with socket.socket() as s:
            try:
                s.bind((host, rng.randint(LOWEST, high) if roomy else 0))
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
