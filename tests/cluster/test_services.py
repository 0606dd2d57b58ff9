"""Services on the test cluster: routing to ready pods by name (ClusterIP), a LoadBalancer
reached from the host, and the kubelet's crash-loop back-off."""

from __future__ import annotations

import json
import socket
import textwrap
import time
import urllib.request
import uuid

import pytest
from kubernetes import client

from aviflow_testcluster import K8S_VERSION, LABEL_POOL, Cluster, free_port, free_ports, wait_for

pytestmark = pytest.mark.cluster

# An HTTP server on the pod's own address answering with the pod's name.
SERVER = textwrap.dedent("""
    import http.server, os
    name = os.environ["POD_NAME"].encode()
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(name)))
            self.end_headers()
            self.wfile.write(name)
        def log_message(self, *args):
            pass
    address = os.environ.get("BIND", os.environ["POD_IP"])
    server = http.server.ThreadingHTTPServer((address, int(os.environ["PORT"])), Handler)
    print("listening", flush=True)
    server.serve_forever()
""")

# Fetches each URL in argv a few times by name; prints what came back, and what it resolved.
# Also asks the API server for its version through https://kubernetes.default.svc, as
# in-cluster clients that use the name (not KUBERNETES_SERVICE_HOST) do.
CLIENT = textwrap.dedent("""
    import json, os, socket, ssl, sys, time, urllib.request
    out = {"bodies": {}, "resolved": {}, "env": os.environ.get("WEB_SERVICE_HOST", "")}
    sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
    req = urllib.request.Request(
        "https://kubernetes.default.svc/version",
        headers={"Authorization": "Bearer " + open(sa + "token").read()},
    )
    tls = ssl.create_default_context(cafile=sa + "ca.crt")
    out["apiserver"] = json.load(urllib.request.urlopen(req, context=tls, timeout=10))["gitVersion"]
    for url in sys.argv[1:]:
        host = url.split("/")[2].split(":")[0]
        out["resolved"][host] = socket.gethostbyname(host)
        bodies = out["bodies"][url] = []
        deadline = time.time() + 30
        while len(bodies) < 4:
            try:
                bodies.append(urllib.request.urlopen(url, timeout=5).read().decode())
            except OSError as e:
                if time.time() > deadline:
                    raise
                print("retrying", url, e, flush=True)
                time.sleep(0.2)
    print(json.dumps(out), flush=True)
""")


def pod(name: str, script: str, *, labels: dict | None = None, args: tuple = (), env=()) -> dict:
    """A pod on a CPU node running ``python -c script *args`` with POD_NAME and POD_IP."""
    field = [
        {"name": n, "valueFrom": {"fieldRef": {"fieldPath": f}}}
        for n, f in (("POD_NAME", "metadata.name"), ("POD_IP", "status.podIP"))
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "nodeSelector": {LABEL_POOL: "cpu"},
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": "ignored",
                    "command": ["python", "-c", script, *args],
                    "env": field + list(env),
                }
            ],
        },
    }


def backend(name: str, app: str, port: int, bind: str | None = None) -> dict:
    """A pod serving its name over HTTP on ``port`` of its pod IP (or of ``bind``)."""
    env = [{"name": "PORT", "value": str(port)}]
    if bind is not None:
        env.append({"name": "BIND", "value": bind})
    p = pod(name, SERVER, labels={"app": app}, env=env)
    p["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": port}]
    return p


def service(name: str, app: str, port: int, target: int | str, type_: str = "ClusterIP") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "type": type_,
            "selector": {"app": app},
            "ports": [{"name": "http", "port": port, "targetPort": target}],
        },
    }


def listening(cluster: Cluster, ns: str, name: str) -> bool:
    try:
        return "listening" in cluster.read_logs(ns, name)
    except (OSError, ValueError):
        return False


def gone(core: client.CoreV1Api, ns: str, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, ns)
        return False
    except client.ApiException as e:
        return e.status == 404


def fetch(url: str) -> str:
    """The body at ``url`` ("" if the connection failed: the caller waits and retries)."""
    try:
        return urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        return ""


def hosts_address(cluster: Cluster, ns: str, pod_name: str, host: str) -> str | None:
    """The address ``host`` has in a pod's /etc/hosts (the agent's file for it)."""
    for line in (cluster.pods_dir / ns / pod_name / "hosts").read_text().splitlines():
        ip, _, names = line.partition("\t")
        if host in names.split():
            return ip
    return None


def refused(address: str, port: int) -> bool:
    """True if a connect to ``address:port`` fails at once (refused, reset or EOF) rather
    than reaching a server; a hang would fail the 5 s timeout instead."""
    try:
        with socket.create_connection((address, port), timeout=5) as c:
            c.sendall(b"GET / HTTP/1.0\r\n\r\n")
            return c.recv(100) == b""
    except (ConnectionRefusedError, ConnectionResetError):
        return True


def start_backends(cluster: Cluster, core: client.CoreV1Api, ns: str, names, app, port) -> None:
    for name in names:
        core.create_namespaced_pod(ns, backend(name, app, port))
    for name in names:
        wait_for(lambda n=name: listening(cluster, ns, n), 60, f"{name} listening")


# ---------------------------------------------------------------------------- tests
def test_cluster_ip_service_by_name_and_named_target_port(k8s_cluster, k8s_namespace):
    ns, app = k8s_namespace, f"web-{uuid.uuid4().hex[:6]}"
    backends = {f"{app}-a", f"{app}-b"}
    pod_port, svc_port = free_ports(2)
    with k8s_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_service(ns, service("web", app, svc_port, "http"))
        start_backends(k8s_cluster, core, ns, sorted(backends), app, pod_port)
        # The backends' own hosts files name the Service; from the host (same network) its
        # address answers from both once the agent sees both servers listening.
        fqdn = f"web.{ns}.svc.cluster.local"
        some = sorted(backends)[0]
        address = wait_for(lambda: hosts_address(k8s_cluster, ns, some, fqdn), 10, "record")
        answered: set[str] = set()

        def both_answer() -> bool:
            answered.add(fetch(f"http://{address}:{svc_port}/"))
            return answered >= backends

        wait_for(both_answer, 30, lambda: f"both backends through the Service ({answered})")

        urls = [f"http://web:{svc_port}/", f"http://web.{ns}.svc.cluster.local:{svc_port}/"]
        fetcher = pod("client", CLIENT, args=tuple(urls))
        fetcher["spec"]["restartPolicy"] = "Never"
        core.create_namespaced_pod(ns, fetcher)
        wait_for(
            lambda: core.read_namespaced_pod("client", ns).status.phase in ("Succeeded", "Failed"),
            60,
            "the client pod to finish",
        )
        logs = k8s_cluster.read_logs(ns, "client")
        assert core.read_namespaced_pod("client", ns).status.phase == "Succeeded", logs
        out = json.loads(logs.strip().splitlines()[-1])
        assert out["resolved"] == {"web": address, fqdn: address}
        assert address.startswith("127.") and address != "127.0.0.1"
        cluster_ip = core.read_namespaced_service("web", ns).spec.cluster_ip
        assert address != cluster_ip  # the apiserver's ClusterIP is not routable here
        assert out["env"] == address  # WEB_SERVICE_HOST, as the kubelet injects it
        assert out["apiserver"] == K8S_VERSION  # default/kubernetes routes to the API server
        for url in urls:
            bodies = out["bodies"][url]
            assert set(bodies) == backends, bodies  # round-robin over both ready pods

        # Without ready endpoints, connections are refused at once. (Wait for both backends to
        # be gone first: while one is stopping and the other still listens, a connection that
        # met the stopping one was refused and the next one reached the other.)
        for name in backends:
            core.delete_namespaced_pod(name, ns)
        for name in backends:
            wait_for(lambda n=name: gone(core, ns, n), 30, f"{name} deleted")
        wait_for(lambda: refused(address, svc_port), 30, "connections refused without endpoints")
        t0 = time.monotonic()
        assert refused(address, svc_port)
        assert time.monotonic() - t0 < 5


def test_load_balancer_service_reached_from_the_host(k8s_cluster, k8s_namespace):
    ns, app = k8s_namespace, f"lb-{uuid.uuid4().hex[:6]}"
    pod_port, svc_port = free_ports(2)
    with k8s_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        start_backends(k8s_cluster, core, ns, [f"{app}-0"], app, pod_port)
        core.create_namespaced_service(
            ns, service("front", app, svc_port, pod_port, "LoadBalancer")
        )

        def ingress_ip() -> str:
            return k8s_cluster.kubectl(
                "get",
                "svc",
                "front",
                "-n",
                ns,
                "-o",
                "jsonpath={.status.loadBalancer.ingress[0].ip}",
            ).stdout.strip()

        ip = wait_for(ingress_ip, 30, "status.loadBalancer.ingress")
        assert ip.startswith("127.")
        body = urllib.request.urlopen(f"http://{ip}:{svc_port}/", timeout=5).read().decode()
        assert body == f"{app}-0"
        # Every pod's /etc/hosts names it (the backend's own file, rewritten in place).
        fqdn = f"front.{ns}.svc.cluster.local"
        wait_for(lambda: hosts_address(k8s_cluster, ns, f"{app}-0", fqdn) == ip, 10, "hosts record")

        core.delete_namespaced_service("front", ns)
        wait_for(lambda: refused(ip, svc_port), 30, "the deleted Service's address to refuse")
        wait_for(
            lambda: hosts_address(k8s_cluster, ns, f"{app}-0", fqdn) is None, 10, "record removed"
        )


def test_service_port_held_by_a_server_on_every_address(k8s_cluster, k8s_namespace):
    """A server that binds ``0.0.0.0:<port>`` (JupyterHub's hub does by default) behind a
    Service of the same port, created first as Helm does: the agent does not take the port
    on the Service's address before the server holds it on every address (the server would
    fail to bind), and connections to the Service's address then reach that server."""
    ns, app = k8s_namespace, f"wild-{uuid.uuid4().hex[:6]}"
    port = free_port()
    with k8s_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_service(ns, service("hub", app, port, "http", "LoadBalancer"))
        core.create_namespaced_pod(ns, backend(f"{app}-0", app, port, bind="0.0.0.0"))
        wait_for(lambda: listening(k8s_cluster, ns, f"{app}-0"), 60, "the server listening")
        ip = wait_for(
            lambda: (
                core.read_namespaced_service("hub", ns).status.load_balancer.ingress or [None]
            )[0],
            30,
            "status.loadBalancer.ingress",
        ).ip
        body = urllib.request.urlopen(f"http://{ip}:{port}/", timeout=5).read().decode()
        assert body == f"{app}-0"
        st = core.read_namespaced_pod(f"{app}-0", ns).status.container_statuses[0]
        assert st.restart_count == 0 and st.state.running, st


def test_crash_loop_back_off(k8s_cluster, k8s_namespace):
    ns = k8s_namespace
    crasher = pod("crasher", "import sys; print('crash', flush=True); sys.exit(1)")
    with k8s_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        uid = core.create_namespaced_pod(ns, crasher).metadata.uid

        def status() -> client.V1ContainerStatus | None:
            st = core.read_namespaced_pod("crasher", ns).status.container_statuses
            return st[0] if st else None

        def backing_off(window: str):
            def check():
                st = status()
                waiting = st and st.state.waiting
                return (
                    waiting
                    and waiting.reason == "CrashLoopBackOff"
                    and window in waiting.message
                    and st
                )

            return check

        # The first exit restarts at once; the second waits 10 s.
        st = wait_for(backing_off("10s"), 60, "CrashLoopBackOff")
        seen = time.monotonic()
        assert st.state.waiting.message == (
            f"back-off 10s restarting failed container=main pod=crasher_{ns}({uid})"
        )
        assert st.restart_count == 1
        assert st.last_state.terminated.exit_code == 1
        assert st.last_state.terminated.reason == "Error"
        assert st.state.running is None and st.state.terminated is None and not st.ready
        assert core.read_namespaced_pod("crasher", ns).status.phase == "Running"

        while time.monotonic() - seen < 5:  # no restart within 5 s of the back-off
            assert status().restart_count == 1
            time.sleep(0.5)
        st = wait_for(backing_off("20s"), 30, "the second restart, then a 20 s back-off")
        assert st.restart_count == 2
        assert time.monotonic() - seen >= 5
        assert k8s_cluster.read_logs(ns, "crasher").count("crash") == 3

        # Deletion does not sleep through the back-off.
        t0 = time.monotonic()
        core.delete_namespaced_pod("crasher", ns)
        wait_for(lambda: gone(core, ns, "crasher"), 15, "the pod to be deleted")
        assert time.monotonic() - t0 < 15  # the back-off it was in lasts 20 s
