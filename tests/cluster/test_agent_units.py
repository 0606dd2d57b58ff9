"""The node agent's Service proxy, Service records and crash-loop back-off, without a cluster.

The proxy is exercised with real sockets on 127.0.0.1; the back-off on a fake clock (the
cluster test ``test_services.py::test_crash_loop_back_off`` checks the real timing)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from aviflow_testcluster import free_port
from aviflow_testcluster._agent_backoff import CrashLoopBackOff, crash_loop_message, go_duration
from aviflow_testcluster._agent_proxy import ProxyLoop, ServiceProxy
from aviflow_testcluster._agent_service_model import (
    Endpoint,
    Service,
    hosts_line,
    link_env,
    listening_sockets,
    service_targets,
    serving,
)


# ------------------------------------------------------------------ back-off
class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_back_off_doubles_to_five_minutes_and_resets_after_ten():
    clock = FakeClock()
    b = CrashLoopBackOff(clock)
    delays = []
    for _ in range(9):
        exited = clock.t
        wait = b.remaining("main", exited)
        delays.append(wait)
        clock.t += wait
        assert b.remaining("main", exited) == 0
        b.restarted("main", exited)
        clock.t += 1  # the container runs a second, then exits again
    # the kubelet restarts the first exit at once, then waits 10 s, 20 s, ... up to 300 s
    assert delays == [0, 10, 20, 40, 80, 160, 300, 300, 300]
    assert b.remaining("main", clock.t) == 300 and b.window("main") == 300
    clock.t += 600.5  # ran ten minutes since its last restart: a fresh start
    assert b.remaining("main", clock.t) == 0
    b.restarted("main", clock.t)
    assert b.window("main") == 10


def test_back_off_message_is_the_kubelets():
    assert [go_duration(s) for s in (10, 40, 80, 160, 300)] == [
        "10s",
        "40s",
        "1m20s",
        "2m40s",
        "5m0s",
    ]
    assert (
        crash_loop_message(20, "main", "web-0", "team", "u-1")
        == "back-off 20s restarting failed container=main pod=web-0_team(u-1)"
    )


# ---------------------------------------------------------- Service records
def _service(**spec) -> Service:
    obj = {
        "metadata": {"uid": "u1", "namespace": "team", "name": "web-api"},
        "spec": {"clusterIP": "10.96.0.9", "selector": {"app": "web"}, **spec},
    }
    return Service.from_json(obj)


def test_routing_and_names():
    svc = _service(
        ports=[
            {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"},
            {"name": "raw", "port": 81, "targetPort": 9001},
            {"name": "dns", "port": 53, "protocol": "UDP"},
        ]
    )
    assert svc.routed and not _service(clusterIP="None").routed
    assert not _service(selector={}).routed  # no endpoints controller for manual Endpoints
    pods = [
        Endpoint("team", {"app": "web", "x": "1"}, "127.9.0.2", {("http", "TCP"): 8080}),
        Endpoint("team", {"app": "web"}, "127.9.0.3", {}),  # no port named http
        Endpoint("other", {"app": "web"}, "127.9.0.4", {("http", "TCP"): 8080}),
        Endpoint("team", {"app": "db"}, "127.9.0.5", {("http", "TCP"): 8080}),
    ]
    assert service_targets(svc, pods, 6443) == {
        80: [("127.9.0.2", 8080)],
        81: [("127.9.0.2", 9001), ("127.9.0.3", 9001)],
    }
    with_address = replace(svc, address="127.9.1.7")
    assert hosts_line(with_address, "team") == (
        "127.9.1.7\tweb-api.team.svc.cluster.local web-api.team.svc web-api.team web-api"
    )
    assert hosts_line(with_address, "other") == (
        "127.9.1.7\tweb-api.team.svc.cluster.local web-api.team.svc web-api.team"
    )
    assert not _service(clusterIP="").routed and not _service(type="ExternalName").routed


def test_link_variables_are_the_kubelets():
    svc = _service(
        ports=[
            {"name": "http-alt", "port": 80, "protocol": "TCP"},
            {"name": "dns", "port": 53, "protocol": "UDP"},
        ]
    )
    svc = replace(svc, address="127.9.1.7")
    assert link_env(svc) == {
        "WEB_API_SERVICE_HOST": "127.9.1.7",
        "WEB_API_SERVICE_PORT": "80",
        "WEB_API_SERVICE_PORT_HTTP_ALT": "80",
        "WEB_API_SERVICE_PORT_DNS": "53",
        "WEB_API_PORT": "tcp://127.9.1.7:80",
        "WEB_API_PORT_80_TCP": "tcp://127.9.1.7:80",
        "WEB_API_PORT_80_TCP_PROTO": "tcp",
        "WEB_API_PORT_80_TCP_PORT": "80",
        "WEB_API_PORT_80_TCP_ADDR": "127.9.1.7",
        "WEB_API_PORT_53_UDP": "udp://127.9.1.7:53",
        "WEB_API_PORT_53_UDP_PROTO": "udp",
        "WEB_API_PORT_53_UDP_PORT": "53",
        "WEB_API_PORT_53_UDP_ADDR": "127.9.1.7",
    }


def test_listening_sockets_from_the_kernel_table():
    """An endpoint serves once a socket listens on its pod IP or on every address; the
    kernel's table tells, without connecting to the pod."""
    specific = socket.create_server(("127.0.0.1", 0))
    wildcard = socket.create_server(("0.0.0.0", 0))
    servers = [specific, wildcard]
    if socket.has_dualstack_ipv6():  # a server on "::" takes IPv4 connections too
        servers.append(socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True))
    connected = socket.create_connection(specific.getsockname()[:2])
    try:
        sockets = listening_sockets()
        sp, *wild = (s.getsockname()[1] for s in servers)
        assert ("127.0.0.1", sp) in sockets
        assert ("127.0.0.1", connected.getsockname()[1]) not in sockets  # not listening
        assert serving(("127.0.0.1", sp), sockets) and not serving(("127.9.9.9", sp), sockets)
        for port in wild:
            assert ("*", port) in sockets and serving(("127.9.9.9", port), sockets)
    finally:
        for s in (connected, *servers):
            s.close()


# -------------------------------------------------------------------- proxy
class Backend:
    """A TCP server that reads until the client half-closes, then answers ``<name>:<data>``
    and closes: it only answers if the proxy passes the half-close on."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                with conn:
                    data = b""
                    while chunk := conn.recv(65536):
                        data += chunk
                    conn.sendall(self.name.encode() + b":" + data)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(5)


def exchange(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        c.sendall(payload)
        c.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := c.recv(65536):
            out += chunk
        return out


@pytest.fixture
def proxy_loop() -> Iterator[ProxyLoop]:
    loop = ProxyLoop()
    loop.start()
    yield loop
    loop.stop()
    assert not loop.thread.is_alive()


def test_proxy_round_robin_half_close_and_refusal(proxy_loop):
    a, b = Backend("a"), Backend("b")
    port = free_port()
    proxy = ServiceProxy("team/web", "127.0.0.1")
    try:
        targets = [("127.0.0.1", a.port), ("127.0.0.1", b.port)]
        assert proxy_loop.call(proxy.apply({port: targets})) == {}
        big = bytes(range(256)) * 4096  # 1 MiB each way: back-pressure, not one chunk
        answers = [exchange(port, big) for _ in range(4)]
        assert [x[:2] for x in answers] == [b"a:", b"b:", b"a:", b"b:"]
        assert all(x[2:] == big for x in answers)

        # an endpoint that went away is skipped while another answers
        b.close()
        assert {exchange(port, b"x") for _ in range(3)} == {b"a:x"}

        # no endpoints: the port is not listened on, a connect is refused at once
        proxy_loop.call(proxy.apply({port: []}))
        t0 = time.monotonic()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
        assert time.monotonic() - t0 < 2
    finally:
        proxy_loop.call(proxy.close())
        a.close()
        b.close()


def test_proxy_close_resets_open_connections(proxy_loop):
    backend = socket.create_server(("127.0.0.1", 0))
    port = free_port()
    proxy = ServiceProxy("team/web", "127.0.0.1")
    try:
        proxy_loop.call(proxy.apply({port: [("127.0.0.1", backend.getsockname()[1])]}))
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        upstream, _ = backend.accept()
        client.sendall(b"ping")
        assert upstream.recv(4) == b"ping"
        proxy_loop.call(proxy.close())
        assert proxy.connections == set()
        client.settimeout(5)
        with contextlib.suppress(ConnectionResetError):
            assert client.recv(10) == b""
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
        upstream.settimeout(5)
        with contextlib.suppress(ConnectionResetError):
            assert upstream.recv(10) == b""
        client.close()
        upstream.close()
    finally:
        backend.close()


# ------------------------------------------------------------------ pod status
def test_a_status_the_api_server_did_not_take_is_sent_again_until_it_does(tmp_path):
    """A pod that ends while the API server is away (killed, restarting) must not stay
    Running for ever: as the kubelet's status manager, the agent sends it again."""
    from types import SimpleNamespace

    from urllib3.exceptions import MaxRetryError

    from aviflow_testcluster._agent_pod import PodRunner

    sent: list[str] = []
    away = [True]

    def patch(name, namespace, body, **kw):
        if away[0]:
            raise MaxRetryError(None, "/api/v1/...", "Connection refused")
        sent.append(body["status"]["phase"])

    agent = SimpleNamespace(
        core=SimpleNamespace(patch_namespaced_pod_status=patch),
        pods_dir=tmp_path,
        args=SimpleNamespace(cluster_id="c1"),
    )
    pod = {
        "metadata": {"uid": "u1", "name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "main"}]},
    }
    runner = PodRunner(agent, pod)  # type: ignore[arg-type]
    runner.phase = "Succeeded"
    runner.patch_status()  # no exception: the pod's runner goes on
    assert runner.status_unsent and sent == []
    runner.resend_status()  # within a second of the last try: not yet
    assert sent == []
    away[0] = False
    runner.status_tried -= 1.0
    runner.resend_status()
    assert sent == ["Succeeded"] and not runner.status_unsent
    runner.resend_status()  # taken: nothing more to send
    assert sent == ["Succeeded"]
