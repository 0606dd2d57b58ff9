"""aviflow._ports: free ports come from below the kernel's ephemeral range, outside the
range TrainJob pods take for their rendezvous, distinct, and really free; the range falls
back to Linux's default where /proc cannot be read."""

from __future__ import annotations

import socket
from pathlib import Path

from aviflow import _ports


def test_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    low, _ = _ports.ephemeral_range()
    ports = _ports.free_ports(9)
    assert len(set(ports)) == 9
    assert all(_ports.LOWEST <= p < low for p in ports)
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))  # free now


def test_the_range_has_a_default(tmp_path: Path) -> None:
    assert _ports.ephemeral_range(tmp_path / "missing") == (32768, 60999)
    (tmp_path / "range").write_text("40000\t50000\n")
    assert _ports.ephemeral_range(tmp_path / "range") == (40000, 50000)
    (tmp_path / "bad").write_text("x")
    assert _ports.ephemeral_range(tmp_path / "bad") == (32768, 60999)


def test_no_free_port_is_one_a_trainjob_may_take_for_its_rendezvous() -> None:
    """The test cluster's components and local jobs take free ports on the host its pods
    share: one in the rendezvous range (etcd's, once) fails the attempt whose port it is."""
    from aviflow.k8s import manifests

    ports = _ports.free_ports(400)  # ~44% of them fell in the range before
    assert [p for p in ports if p in _ports.RENDEZVOUS] == []
    assert {p >= _ports.RENDEZVOUS.stop for p in ports} == {False, True}  # both spans drawn
    attempts = {manifests.main_port(f"job-{i:04d}", a) for i in range(300) for a in (1, 2)}
    assert min(attempts) >= _ports.RENDEZVOUS.start and max(attempts) < _ports.RENDEZVOUS.stop
