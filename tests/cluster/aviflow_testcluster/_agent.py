"""The node agent: plays the kubelet for the fake nodes, running pods as local processes.

Run by the launcher as ``python -m aviflow_testcluster._agent``. It

* registers the fake Nodes (capacity, labels, taints), reports them Ready and
  renews their Leases in ``kube-node-lease`` every 10 s;
* list+watches pods bound to its nodes and, for each, runs the containers'
  ``command`` + ``args`` as local processes (the image is ignored) with the pod's
  environment (downward API, ConfigMap/Secret refs, ``$(VAR)`` expansion);
* gives each pod its own address in ``127.<block>.0.0/16`` and its own mount and
  UTS namespaces (``unshare``) in which a private ``/etc/hosts`` maps
  ``<hostname>.<subdomain>[.<ns>.svc.cluster.local]`` of the pods in the namespace
  to their addresses, the hostname is the pod's, and each volume directory is
  bind-mounted at its ``mountPath``;
* reports phase, conditions, ``podIP`` and container states/exit codes through
  the status subresource, honours ``restartPolicy`` with the kubelet's crash-loop
  back-off (``_agent_backoff``);
* routes Services (``_agent_services``, ``_agent_proxy``): an address per Service, a TCP
  proxy on it to the ready pods, its names in every pod's ``/etc/hosts``, the kubelet's
  ``<SVC>_SERVICE_HOST`` variables and ``status.loadBalancer`` for LoadBalancers;
* on deletion sends SIGTERM to every process of the pod, SIGKILL after the grace
  period, then removes the Pod object (as the kubelet does);
* serves ``/containerLogs/<ns>/<pod>/<container>`` over HTTPS on the nodes'
  kubelet port so ``kubectl logs`` works; the same files are under
  ``<state-dir>/pods/<ns>/<pod>/logs/<container>.log``.

Modules: ``_agent_node`` (Nodes, status, Leases), ``_agent_pod`` (``PodRunner``),
``_agent_env`` (environment, command line), ``_agent_volumes`` (volumes),
``_agent_logs`` (the log server), ``_agent_services`` + ``_agent_proxy`` (Services),
``_agent_backoff`` (restart back-off) and ``_agent_common`` (constants, sandbox paths);
this one is the ``Agent`` (pod reflector, IPs, hosts records) and ``main``.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
import time
from pathlib import Path

from kubernetes import client, config

try:  # run as a module of the package, or by path
    from . import _procs
    from ._agent_common import WATCH_SECONDS, RawWatch, container_log_path, log
    from ._agent_logs import start_log_server
    from ._agent_node import NodesMixin
    from ._agent_pod import PodRunner
    from ._agent_services import Services
    from ._nodes import NodeSpec
except ImportError:  # pragma: no cover
    from aviflow_testcluster import _procs
    from aviflow_testcluster._agent_common import WATCH_SECONDS, RawWatch, container_log_path, log
    from aviflow_testcluster._agent_logs import start_log_server
    from aviflow_testcluster._agent_node import NodesMixin
    from aviflow_testcluster._agent_pod import PodRunner
    from aviflow_testcluster._agent_services import Services
    from aviflow_testcluster._nodes import NodeSpec

__all__ = ["Agent", "container_log_path", "main"]  # container_log_path: its old home


# ----------------------------------------------------------------- the agent
class Agent(NodesMixin):
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.state_dir = Path(args.state_dir)
        self.pods_dir = self.state_dir / "pods"
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        self.nodes = {
            n["name"]: NodeSpec.from_json(n) for n in json.loads(Path(args.nodes).read_text())
        }
        cfg = client.Configuration()
        config.load_kube_config(config_file=args.kubeconfig, client_configuration=cfg)
        cfg.connection_pool_maxsize = 32
        self.api = client.ApiClient(cfg)
        self.core = client.CoreV1Api(self.api)
        self.coord = client.CoordinationV1Api(self.api)
        self.stopping = threading.Event()
        self.lock = threading.RLock()
        self.pods: dict[str, PodRunner] = {}
        self.next_ip = 2
        with open(cfg.ssl_ca_cert, "rb") as f:
            self.ca_pem = f.read()
        self.services = Services(self)

    # --------------------------------------------------------------- pods
    def allocate_ip(self) -> str:
        with self.lock:
            while True:
                n = self.next_ip
                self.next_ip += 1
                if n % 256 not in (0, 255):
                    return f"127.{self.args.ip_block}.{n // 256}.{n % 256}"

    def hosts_entries(self, namespace: str) -> list[str]:
        """DNS-like records for a pod in ``namespace``: every pod of the namespace that has a
        hostname + subdomain, then every routed Service (``_agent_services``)."""
        lines = []
        with self.lock:
            for r in self.pods.values():
                if r.namespace == namespace and r.ip and not r.finished:
                    lines.extend(r.dns_lines())
        return lines + self.services.hosts_lines(namespace)

    def refresh_hosts(self, namespace: str | None) -> None:
        """Rewrite the hosts files of the pods in ``namespace`` (None: of every pod)."""
        with self.lock:
            runners = [r for r in self.pods.values() if namespace in (None, r.namespace)]
        for r in runners:
            r.write_hosts()

    def refresh_all_hosts(self) -> None:
        """Services are visible from every namespace: a change rewrites every hosts file."""
        self.refresh_hosts(None)

    def reflect(self) -> None:
        """list+watch pods, dispatching those bound to our nodes."""
        while not self.stopping.is_set():
            try:
                resp = self.core.list_pod_for_all_namespaces(_preload_content=False)
                data = json.loads(resp.data)
                seen = set()
                for pod in data["items"]:
                    seen.add(pod["metadata"]["uid"])
                    self.dispatch("MODIFIED", pod)
                with self.lock:
                    gone = [r for uid, r in self.pods.items() if uid not in seen]
                for r in gone:
                    self.dispatch("DELETED", r.pod)
                rv = data["metadata"]["resourceVersion"]
                w = RawWatch()
                # The server ends the watch after WATCH_SECONDS; the client-side read timeout
                # ends a stream that went silent without closing, so a stuck connection can
                # never hide new pods for long. Each relist also resyncs every known pod.
                for ev in w.stream(
                    self.core.list_pod_for_all_namespaces,
                    resource_version=rv,
                    timeout_seconds=WATCH_SECONDS,
                    allow_watch_bookmarks=True,
                    _request_timeout=(10, WATCH_SECONDS + 15),
                ):
                    if self.stopping.is_set():
                        w.stop()
                        break
                    if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self.dispatch(ev["type"], ev["raw_object"])
            except client.ApiException as e:
                if self.stopping.is_set():
                    return
                log.info("watch ended (%s); relisting", e.status)
                time.sleep(0.5)
            except Exception as e:
                if self.stopping.is_set():
                    return
                log.warning("watch failed: %r; relisting", e)
                time.sleep(1)

    def dispatch(self, kind: str, pod: dict) -> None:
        if pod["spec"].get("nodeName") not in self.nodes:
            return
        uid = pod["metadata"]["uid"]
        with self.lock:
            runner = self.pods.get(uid)
            if runner is None:
                if kind == "DELETED" or pod["status"].get("phase") in ("Succeeded", "Failed"):
                    return
                runner = PodRunner(self, pod)
                self.pods[uid] = runner
                log.info(
                    "pod %s/%s (%s): starting on %s",
                    runner.namespace,
                    runner.name,
                    uid[:8],
                    pod["spec"]["nodeName"],
                )
                runner.start()
                return
        runner.update(kind, pod)

    def forget(self, runner: PodRunner) -> None:
        with self.lock:
            self.pods.pop(runner.uid, None)
        self.services.kick()

    # ------------------------------------------------------------- main
    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.stopping.set())
        signal.signal(signal.SIGINT, lambda *_: self.stopping.set())
        self.register_nodes()
        threading.Thread(target=self.heartbeat_loop, daemon=True, name="heartbeat").start()
        start_log_server(self)
        self.services.start()
        threading.Thread(target=self.reflect, daemon=True, name="reflector").start()
        log.info("node agent up for %s", ", ".join(self.nodes))
        self.stopping.wait()
        log.info("stopping: killing all pods")
        with self.lock:
            runners = list(self.pods.values())
        for r in runners:
            r.kill(grace=min(r.grace_period(), 5))
        _procs.sweep(f"{self.args.cluster_id}/pod/", prefix=True)
        self.services.stop()
        log.info("node agent stopped")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--cluster-id", required=True)
    ap.add_argument("--ip-block", type=int, required=True)
    ap.add_argument("--kubelet-port", type=int, required=True)
    ap.add_argument("--kubernetes-port", type=int, required=True)
    ap.add_argument("--tls-cert", required=True)
    ap.add_argument("--tls-key", required=True)
    ap.add_argument("--nodes", required=True, help="JSON list of node specs")
    ap.add_argument(
        "--images", default="", help="the OCI layout of images pods may run in (make images)"
    )
    ap.add_argument(
        "--image-cache", default="", help="the build cache images are unpacked into, per layer"
    )
    ap.add_argument(
        "--host-mode",
        action="store_true",
        help="run a container whose image is not in --images on the host (else ErrImagePull)",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(threadName)s %(message)s"
    )
    Agent(args).run()


if __name__ == "__main__":
    main()
