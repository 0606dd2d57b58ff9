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
  the status subresource, honours ``restartPolicy``;
* on deletion sends SIGTERM to every process of the pod, SIGKILL after the grace
  period, then removes the Pod object (as the kubelet does);
* serves ``/containerLogs/<ns>/<pod>/<container>`` over HTTPS on the nodes'
  kubelet port so ``kubectl logs`` works; the same files are under
  ``<state-dir>/pods/<ns>/<pod>/logs/<container>.log``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import http.server
import json
import logging
import math
import os
import re
import shlex
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from kubernetes import client, config, watch

from aviflow._units import parse_quantity as quantity

try:  # run as a module of the package, or by path
    from . import _procs
    from ._nodes import NodeSpec
except ImportError:  # pragma: no cover
    from aviflow_testcluster import _procs
    from aviflow_testcluster._nodes import NodeSpec

log = logging.getLogger("aviflow.node-agent")

K8S_VERSION = "v1.35.4"
LEASE_SECONDS = 40
WATCH_SECONDS = 60
SETUP_RETRY_SECONDS = 1.0
RUNTIME = "aviflow-process://1"


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pod_dir(pods_dir: Path, namespace: str, pod: str) -> Path:
    return pods_dir / namespace / pod


def container_log_path(
    pods_dir: Path, namespace: str, pod: str, container: str | None = None
) -> Path:
    logs = pod_dir(pods_dir, namespace, pod) / "logs"
    if container is None:
        names = sorted(p.stem for p in logs.glob("*.log"))
        if len(names) != 1:
            raise ValueError(f"pod {namespace}/{pod} has containers {names}; name one")
        container = names[0]
    return logs / f"{container}.log"


# ---------------------------------------------------------------- env handling
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined vars are replaced, ``$$`` escapes."""

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return _VAR_REF.sub(sub, value)


def field_ref(pod: dict, path: str) -> str:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.*)'\]", path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    simple = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": status.get("hostIP", ""),
        "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs", [])),
        "status.podIP": status.get("podIP", ""),
        "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs", [])),
    }
    if path == "metadata.labels":
        return "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get("labels") or {}).items()))
    if path == "metadata.annotations":
        return "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get("annotations") or {}).items()))
    if path not in simple:
        raise ValueError(f"unsupported fieldRef {path}")
    return simple[path]


def resource_ref(container: dict, node_capacity: dict, ref: dict) -> str:
    res = ref["resource"]
    kind, name = res.split(".", 1)
    resources = container.get("resources") or {}
    value = (resources.get(kind) or {}).get(name)
    if value is None and kind == "requests":
        value = (resources.get("limits") or {}).get(name)
    if value is None:
        value = node_capacity.get(name, "0")
    divisor = quantity(ref.get("divisor", "1"))
    return str(math.ceil(quantity(value) / divisor))


# ----------------------------------------------------------------- the agent
class Agent:
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

    # -------------------------------------------------------------- nodes
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

    # --------------------------------------------------------------- pods
    def allocate_ip(self) -> str:
        with self.lock:
            while True:
                n = self.next_ip
                self.next_ip += 1
                if n % 256 not in (0, 255):
                    return f"127.{self.args.ip_block}.{n // 256}.{n % 256}"

    def hosts_entries(self, namespace: str) -> list[str]:
        """DNS-like records of every pod in ``namespace`` that has a hostname + subdomain."""
        lines = []
        with self.lock:
            for r in self.pods.values():
                if r.namespace == namespace and r.ip and not r.finished:
                    lines.extend(r.dns_lines())
        return lines

    def refresh_hosts(self, namespace: str) -> None:
        with self.lock:
            runners = [r for r in self.pods.values() if r.namespace == namespace]
        for r in runners:
            r.write_hosts()

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
                w = watch.Watch()
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

    # ------------------------------------------------------------- main
    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.stopping.set())
        signal.signal(signal.SIGINT, lambda *_: self.stopping.set())
        self.register_nodes()
        threading.Thread(target=self.heartbeat_loop, daemon=True, name="heartbeat").start()
        start_log_server(self)
        threading.Thread(target=self.reflect, daemon=True, name="reflector").start()
        log.info("node agent up for %s", ", ".join(self.nodes))
        self.stopping.wait()
        log.info("stopping: killing all pods")
        with self.lock:
            runners = list(self.pods.values())
        for r in runners:
            r.kill(grace=min(r.grace_period(), 5))
        _procs.sweep(f"{self.args.cluster_id}/pod/", prefix=True)
        log.info("node agent stopped")


class PodRunner(threading.Thread):
    """Runs one pod: sandbox, volumes, init containers, containers, status, deletion."""

    def __init__(self, agent: Agent, pod: dict) -> None:
        super().__init__(daemon=True, name=f"pod-{pod['metadata']['name']}")
        self.agent = agent
        self.pod = pod
        self.uid = pod["metadata"]["uid"]
        self.name = pod["metadata"]["name"]
        self.namespace = pod["metadata"]["namespace"]
        self.dir = pod_dir(agent.pods_dir, self.namespace, self.name)
        self.ip = ""
        self.finished = False
        self.deleting = threading.Event()
        self.cond = threading.Condition()
        self.procs: dict[str, subprocess.Popen] = {}
        self.statuses: dict[str, dict] = {}
        self.init_statuses: dict[str, dict] = {}
        self.conditions: dict[str, dict] = {}
        self.phase = "Pending"
        self.start_time = now()
        self.marker = f"{agent.args.cluster_id}/pod/{self.uid}"

    # ------------------------------------------------------------ helpers
    @property
    def spec(self) -> dict:
        return self.pod["spec"]

    def hostname(self) -> str:
        return self.spec.get("hostname") or self.name

    def dns_lines(self) -> list[str]:
        sub = self.spec.get("subdomain")
        if not sub:
            return []
        h = self.hostname()
        return [
            f"{self.ip}\t{h}.{sub}.{self.namespace}.svc.cluster.local {h}.{sub}."
            f"{self.namespace}.svc {h}.{sub}"
        ]

    def grace_period(self) -> float:
        meta = self.pod["metadata"]
        g = meta.get("deletionGracePeriodSeconds")
        if g is None:
            g = self.spec.get("terminationGracePeriodSeconds", 30)
        return float(g)

    def update(self, kind: str, pod: dict) -> None:
        with self.cond:
            self.pod = pod
            if kind == "DELETED" or pod["metadata"].get("deletionTimestamp"):
                self.deleting.set()
            self.cond.notify_all()

    def write_hosts(self) -> None:
        if not self.ip:
            return
        # Like the kubelet's hosts file, plus the short names DNS search paths would resolve.
        own = (
            self.dns_lines()[0] + f" {self.hostname()}"
            if self.spec.get("subdomain")
            else f"{self.ip}\t{self.hostname()}"
        )
        lines = [
            "# Kubernetes-managed hosts file (aviflow node agent).",
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost ip6-loopback",
            own,
        ]
        for extra in self.spec.get("hostAliases") or []:
            lines.append(f"{extra['ip']}\t{' '.join(extra.get('hostnames', []))}")
        lines += [
            ln
            for ln in self.agent.hosts_entries(self.namespace)
            if not ln.startswith(self.ip + "\t")
        ]
        data = ("\n".join(lines) + "\n").encode()
        path = self.dir / "hosts"
        # Rewrite in place: the file is bind-mounted by inode into running containers.
        with open(path, "r+b" if path.exists() else "wb") as f:
            f.write(data)
            f.truncate()

    def patch_status(self) -> None:
        conds = []
        for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready"):
            c = self.conditions.get(t)
            if c:
                # reason None clears a stale reason in the strategic merge patch
                conds.append(
                    {
                        "type": t,
                        "status": c["status"],
                        "lastTransitionTime": c["ts"],
                        "reason": c.get("reason") or None,
                    }
                )
        status = {
            "phase": self.phase,
            "conditions": conds,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "startTime": self.start_time,
            "containerStatuses": [
                self.statuses[c["name"]]
                for c in self.spec["containers"]
                if c["name"] in self.statuses
            ],
        }
        if self.init_statuses:
            status["initContainerStatuses"] = [
                self.init_statuses[c["name"]]
                for c in self.spec.get("initContainers") or []
                if c["name"] in self.init_statuses
            ]
        if self.ip:
            status["podIP"] = self.ip
            status["podIPs"] = [{"ip": self.ip}]
        try:
            self.agent.core.patch_namespaced_pod_status(
                self.name, self.namespace, {"status": status}
            )
        except client.ApiException as e:
            if e.status not in (404, 409):
                log.warning("status of %s/%s: %s", self.namespace, self.name, e.reason)

    def set_condition(self, t: str, ok: bool, reason: str = "") -> None:
        status = "True" if ok else "False"
        old = self.conditions.get(t)
        if old and old["status"] == status:
            return
        self.conditions[t] = {"status": status, "ts": now(), "reason": reason}

    # -------------------------------------------------------------- run
    def run(self) -> None:
        try:
            self._run()
        except Exception:
            log.exception("pod %s/%s crashed the runner", self.namespace, self.name)
            self.phase = "Failed"
            self.patch_status()
        finally:
            self.finished = True
            self.agent.refresh_hosts(self.namespace)
            self._await_deletion()

    def _run(self) -> None:
        if self.deleting.is_set():
            return
        uid_file = self.dir / "uid"
        if uid_file.exists() and uid_file.read_text() != self.uid:
            # A previous pod of the same name: keep its sandbox beside, as pod-name.<uid>.
            self.dir.rename(self.dir.with_name(f"{self.name}.{uid_file.read_text()[:8]}"))
        self.dir.mkdir(parents=True, exist_ok=True)
        uid_file.write_text(self.uid)
        (self.dir / "logs").mkdir(exist_ok=True)
        # hostNetwork pods share the node's address, like on a real node.
        self.ip = "127.0.0.1" if self.spec.get("hostNetwork") else self.agent.allocate_ip()
        self.pod.setdefault("status", {})["podIP"] = self.ip
        self.pod["status"]["podIPs"] = [{"ip": self.ip}]
        self.pod["status"]["hostIP"] = "127.0.0.1"
        self.pod["status"]["hostIPs"] = [{"ip": "127.0.0.1"}]
        self.set_condition("PodScheduled", True)
        self.set_condition("Initialized", False, "ContainersNotInitialized")
        self.set_condition("ContainersReady", False, "ContainersNotReady")
        self.set_condition("Ready", False, "ContainersNotReady")
        for c in self.spec.get("initContainers") or []:
            self.init_statuses[c["name"]] = _waiting(c, "PodInitializing")
        for c in self.spec["containers"]:
            self.statuses[c["name"]] = _waiting(c, "ContainerCreating")
        self.write_hosts()
        self.agent.refresh_hosts(self.namespace)
        self.patch_status()
        if not self.set_up(
            self.mount_volumes, "ContainerCreating", "MountVolume.SetUp failed: "
        ) or not self.set_up(self.check_config, "CreateContainerConfigError"):
            return

        # init containers, one after the other (sidecars keep running)
        for c in self.spec.get("initContainers") or []:
            if self.deleting.is_set():
                return
            if c.get("restartPolicy") == "Always":
                self.launch(c, init=True)
                continue
            while True:
                code = self.run_to_end(c, init=True)
                if code == 0 or self.deleting.is_set():
                    break
                if self.spec.get("restartPolicy", "Always") == "Never":
                    self.phase = "Failed"
                    self.patch_status()
                    return
                time.sleep(1)
        self.set_condition("Initialized", True)
        for c in self.spec["containers"]:
            self.launch(c)
        self.phase = "Running"
        self.set_condition("ContainersReady", True)
        self.set_condition("Ready", True)
        self.patch_status()
        self.supervise()

    def supervise(self) -> None:
        policy = self.spec.get("restartPolicy", "Always")
        backoff: dict[str, float] = {}
        while not self.deleting.is_set():
            changed = False
            for c in self.spec["containers"]:
                name = c["name"]
                p = self.procs.get(name)
                if p is None or p.poll() is None:
                    continue
                if self.statuses[name].get("state", {}).get("running"):
                    self.record_exit(c, p.returncode, init=False)
                    changed = True
                code = p.returncode
                restart = policy == "Always" or (policy == "OnFailure" and code != 0)
                if restart and time.monotonic() >= backoff.get(name, 0):
                    backoff[name] = time.monotonic() + 1
                    self.statuses[name]["restartCount"] = (
                        self.statuses[name].get("restartCount", 0) + 1
                    )
                    self.launch(c, restart_count=self.statuses[name]["restartCount"])
                    changed = True
            running = [
                c
                for c in self.spec["containers"]
                if self.statuses[c["name"]].get("state", {}).get("running")
            ]
            done = [
                c
                for c in self.spec["containers"]
                if self.statuses[c["name"]].get("state", {}).get("terminated")
            ]
            ready = len(running) == len(self.spec["containers"])
            self.set_condition("ContainersReady", ready, "" if ready else "ContainersNotReady")
            self.set_condition("Ready", ready, "" if ready else "ContainersNotReady")
            if len(done) == len(self.spec["containers"]) and (
                policy == "Never"
                or (
                    policy == "OnFailure"
                    and all(
                        self.statuses[c["name"]]["state"]["terminated"]["exitCode"] == 0
                        for c in done
                    )
                )
            ):
                ok = all(
                    self.statuses[c["name"]]["state"]["terminated"]["exitCode"] == 0 for c in done
                )
                self.phase = "Succeeded" if ok else "Failed"
                self.set_condition("Ready", False, "PodCompleted")
                self.set_condition("ContainersReady", False, "PodCompleted")
                self.stop_sidecars()
                self.patch_status()
                return
            if changed:
                self.patch_status()
            with self.cond:
                self.cond.wait(0.2)

    def stop_sidecars(self) -> None:
        for c in self.spec.get("initContainers") or []:
            p = self.procs.get(c["name"])
            if p is not None and p.poll() is None:
                _procs.stop_group(p.pid, self.grace_period(), reap=p)

    def _await_deletion(self) -> None:
        """After the pod ends, wait for its deletion and finish it like the kubelet."""
        while not self.deleting.is_set() and not self.agent.stopping.is_set():
            with self.cond:
                self.cond.wait(1)
        if self.agent.stopping.is_set():
            return
        self.kill(self.grace_period())
        if self.pod["metadata"].get("deletionTimestamp"):
            with contextlib.suppress(client.ApiException):
                self.agent.core.delete_namespaced_pod(
                    self.name,
                    self.namespace,
                    grace_period_seconds=0,
                    body=client.V1DeleteOptions(
                        grace_period_seconds=0, preconditions={"uid": self.uid}
                    ),
                )
        self.agent.forget(self)
        self.agent.refresh_hosts(self.namespace)

    def kill(self, grace: float) -> None:
        """SIGTERM every process of the pod, SIGKILL after ``grace`` seconds."""
        procs = [p for p in self.procs.values() if p.poll() is None]
        log.info(
            "pod %s/%s: killing %d process group(s), grace %.0fs",
            self.namespace,
            self.name,
            len(procs),
            grace,
        )
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            time.sleep(0.05)
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(5)
        _procs.sweep(self.marker)
        for init, cs in (
            (True, self.spec.get("initContainers") or []),
            (False, self.spec["containers"]),
        ):
            table = self.init_statuses if init else self.statuses
            for c in cs:
                p = self.procs.get(c["name"])
                running = table.get(c["name"], {}).get("state", {}).get("running")
                if p is not None and running:
                    self.record_exit(c, p.returncode, init=init)
        if not self.agent.stopping.is_set() and not self.finished:
            self.patch_status()

    # ------------------------------------------------------- containers
    def run_to_end(self, c: dict, *, init: bool) -> int:
        p = self.launch(c, init=init)
        while p.poll() is None and not self.deleting.is_set():
            with self.cond:
                self.cond.wait(0.2)
        if p.poll() is None:
            return -1
        self.record_exit(c, p.returncode, init=init)
        self.patch_status()
        return p.returncode

    def record_exit(self, c: dict, code: int, *, init: bool) -> None:
        table = self.init_statuses if init else self.statuses
        st = table[c["name"]]
        started = st.get("state", {}).get("running", {}).get("startedAt", now())
        if code < 0:  # killed by a signal: report like a container runtime
            code = 128 - code
        log.info("pod %s/%s: container %s exited %d", self.namespace, self.name, c["name"], code)
        st["state"] = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": started,
                "finishedAt": now(),
                "containerID": st.get("containerID", ""),
            }
        }
        st["ready"] = False
        st["started"] = False

    def env_for(self, c: dict) -> dict[str, str]:
        base_path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        pybin = str(Path(sys.executable).parent)
        env: dict[str, str] = {
            "PATH": pybin + os.pathsep + base_path,
            "HOME": "/root",
            "HOSTNAME": self.hostname(),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            _procs.MARKER: self.marker,
        }
        api_port = str(self.agent.args.kubernetes_port)
        env.update(
            {
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": api_port,
                "KUBERNETES_SERVICE_PORT_HTTPS": api_port,
                "KUBERNETES_PORT": f"tcp://127.0.0.1:{api_port}",
            }
        )
        for src in c.get("envFrom") or []:
            prefix = src.get("prefix", "")
            if "configMapRef" in src:
                data = self._configmap(
                    src["configMapRef"]["name"], src["configMapRef"].get("optional", False)
                )
            else:
                data = self._secret(
                    src["secretRef"]["name"], src["secretRef"].get("optional", False)
                )
            env.update({prefix + k: v for k, v in data.items()})
        for e in c.get("env") or []:
            if "valueFrom" not in e:
                env[e["name"]] = expand(e.get("value", ""), env)
                continue
            vf = e["valueFrom"]
            if "fieldRef" in vf:
                env[e["name"]] = field_ref(self.current_pod(), vf["fieldRef"]["fieldPath"])
            elif "resourceFieldRef" in vf:
                node = self.agent.nodes[self.spec["nodeName"]]
                env[e["name"]] = resource_ref(c, node.capacity, vf["resourceFieldRef"])
            elif "configMapKeyRef" in vf:
                ref = vf["configMapKeyRef"]
                value = self._configmap(ref["name"], ref.get("optional", False)).get(ref["key"])
                if value is not None:
                    env[e["name"]] = value
            elif "secretKeyRef" in vf:
                ref = vf["secretKeyRef"]
                value = self._secret(ref["name"], ref.get("optional", False)).get(ref["key"])
                if value is not None:
                    env[e["name"]] = value
        return env

    def current_pod(self) -> dict:
        """The pod as the API will show it once our status lands (IPs included)."""
        pod = dict(self.pod)
        pod["status"] = {
            **(pod.get("status") or {}),
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
        }
        return pod

    def _configmap(self, name: str, optional: bool) -> dict[str, str]:
        try:
            return self.agent.core.read_namespaced_config_map(name, self.namespace).data or {}
        except client.ApiException as e:
            if e.status == 404 and optional:
                return {}
            raise _missing("configmap", name, e) from None

    def _secret(self, name: str, optional: bool) -> dict[str, str]:
        try:
            data = self.agent.core.read_namespaced_secret(name, self.namespace).data or {}
        except client.ApiException as e:
            if e.status == 404 and optional:
                return {}
            raise _missing("secret", name, e) from None
        return {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}

    def argv_for(self, c: dict, env: dict[str, str]) -> list[str]:
        command = [expand(a, env) for a in c.get("command") or []]
        args = [expand(a, env) for a in c.get("args") or []]
        argv = command + args
        if not argv:
            raise ValueError(f"container {c['name']} has no command/args (images are not run)")
        return argv

    def launch(self, c: dict, *, init: bool = False, restart_count: int = 0) -> subprocess.Popen:
        table = self.init_statuses if init else self.statuses
        name = c["name"]
        log_path = self.dir / "logs" / f"{name}.log"
        try:
            env = self.env_for(c)
            argv = self.argv_for(c, env)
        except Exception as e:
            table[name] = _waiting(c, "CreateContainerConfigError", str(e))
            self.patch_status()
            raise
        mounts = []
        for m in c.get("volumeMounts") or []:
            src = self.volumes[m["name"]]
            if m.get("subPath"):
                src = src / m["subPath"]
                if not src.exists():
                    src.mkdir(parents=True)
            mounts.append((str(src), m["mountPath"], bool(m.get("readOnly"))))
        workdir = c.get("workingDir") or str(self.dir / "rootfs-cwd")
        script = _sandbox_script(self.dir / "hosts", self.hostname(), mounts, workdir)
        full = [
            "unshare",
            "--mount",
            "--uts",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            script,
            "sh",
            *argv,
        ]
        (self.dir / "rootfs-cwd").mkdir(exist_ok=True)
        with open(log_path, "ab") as out:
            p = subprocess.Popen(
                full,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=str(self.dir),
            )
        self.procs[name] = p
        log.info(
            "pod %s/%s: container %s started (pid %d, restart %d)",
            self.namespace,
            self.name,
            name,
            p.pid,
            restart_count,
        )
        table[name] = {
            "name": name,
            "image": c.get("image", ""),
            "imageID": "",
            "containerID": f"{RUNTIME.split(':')[0]}://{self.uid}-{name}-{restart_count}",
            "ready": True,
            "started": True,
            "restartCount": restart_count,
            "state": {"running": {"startedAt": now()}},
        }
        return p

    # ---------------------------------------------------------- volumes
    def set_up(self, step: Callable[[], object], reason: str, prefix: str = "") -> bool:
        """Run ``step`` until it succeeds, retrying like the kubelet (a ConfigMap such as
        ``kube-root-ca.crt`` may appear only after the pod); meanwhile every container waits
        with ``reason`` and the error. False if the pod is deleted first."""
        reported = ""
        while not self.deleting.is_set():
            try:
                step()
                return True
            except Exception as e:
                message = f"{prefix}{e}"
                if message != reported:
                    log.warning("pod %s/%s: %s: %s", self.namespace, self.name, reason, message)
                    for c in self.spec["containers"]:
                        self.statuses[c["name"]] = _waiting(c, reason, message)
                    self.patch_status()
                    reported = message
            self.deleting.wait(SETUP_RETRY_SECONDS)
        return False

    def mount_volumes(self) -> None:
        self.volumes = self.prepare_volumes()

    def check_config(self) -> None:
        """Every container's env and command resolve (referenced ConfigMaps/Secrets exist)."""
        for c in [*(self.spec.get("initContainers") or []), *self.spec["containers"]]:
            self.argv_for(c, self.env_for(c))

    def prepare_volumes(self) -> dict[str, Path]:
        vols: dict[str, Path] = {}
        root = self.dir / "volumes"
        for v in self.spec.get("volumes") or []:
            name = v["name"]
            path = root / name
            if "emptyDir" in v:
                path.mkdir(parents=True, exist_ok=True)
            elif "hostPath" in v:
                path = Path(v["hostPath"]["path"])
                if (
                    v["hostPath"].get("type") in ("DirectoryOrCreate", None, "")
                    and not path.exists()
                ):
                    path.mkdir(parents=True, exist_ok=True)
            elif "persistentVolumeClaim" in v:
                path = self._pvc_dir(v["persistentVolumeClaim"]["claimName"])
            elif "configMap" in v:
                path.mkdir(parents=True, exist_ok=True)
                data = self._configmap(
                    v["configMap"]["name"], v["configMap"].get("optional", False)
                )
                _write_items(path, data, v["configMap"].get("items"))
            elif "secret" in v:
                path.mkdir(parents=True, exist_ok=True)
                data = self._secret(v["secret"]["secretName"], v["secret"].get("optional", False))
                _write_items(path, data, v["secret"].get("items"))
            elif "downwardAPI" in v:
                path.mkdir(parents=True, exist_ok=True)
                self._write_downward(path, v["downwardAPI"]["items"])
            elif "projected" in v:
                path.mkdir(parents=True, exist_ok=True)
                for s in v["projected"]["sources"]:
                    self._project(path, s)
            else:
                raise ValueError(f"volume {name}: type not supported by the node agent")
            vols[name] = path
        return vols

    def _pvc_dir(self, claim: str) -> Path:
        """A bound PV with hostPath/local uses that path; otherwise one directory per claim."""
        pvc = self.agent.core.read_namespaced_persistent_volume_claim(claim, self.namespace)
        pv_name = pvc.spec.volume_name
        if pv_name:
            pv = self.agent.core.read_persistent_volume(pv_name)
            src = pv.spec.host_path or pv.spec.local
            if src is not None:
                p = Path(src.path)
                p.mkdir(parents=True, exist_ok=True)
                return p
        p = self.agent.state_dir / "claims" / self.namespace / claim
        p.mkdir(parents=True, exist_ok=True)
        return p

    def _write_downward(self, path: Path, items: list[dict]) -> None:
        for it in items:
            if "fieldRef" in it:
                value = field_ref(self.current_pod(), it["fieldRef"]["fieldPath"])
            else:
                cname = (
                    it["resourceFieldRef"].get("containerName")
                    or self.spec["containers"][0]["name"]
                )
                c = next(x for x in self.spec["containers"] if x["name"] == cname)
                value = resource_ref(
                    c, self.agent.nodes[self.spec["nodeName"]].capacity, it["resourceFieldRef"]
                )
            target = path / it["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(value)

    def _project(self, path: Path, s: dict) -> None:
        if "serviceAccountToken" in s:
            sat = s["serviceAccountToken"]
            req = {
                "spec": {
                    "audiences": [sat["audience"]] if sat.get("audience") else None,
                    "expirationSeconds": sat.get("expirationSeconds", 3607),
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": self.name,
                        "uid": self.uid,
                    },
                }
            }
            tok = self.agent.core.create_namespaced_service_account_token(
                self.spec.get("serviceAccountName") or "default", self.namespace, req
            )
            (path / sat["path"]).write_text(tok.status.token)
        elif "configMap" in s:
            data = self._configmap(s["configMap"]["name"], s["configMap"].get("optional", False))
            _write_items(path, data, s["configMap"].get("items"))
        elif "secret" in s:
            data = self._secret(s["secret"]["name"], s["secret"].get("optional", False))
            _write_items(path, data, s["secret"].get("items"))
        elif "downwardAPI" in s:
            self._write_downward(path, s["downwardAPI"]["items"])


def _missing(kind: str, name: str, e: client.ApiException) -> LookupError:
    """The kubelet's short message for an object a pod needs (not the whole HTTP exchange)."""
    what = "not found" if e.status == 404 else f"unreadable ({e.status} {e.reason})"
    return LookupError(f'{kind} "{name}" {what}')


def _waiting(c: dict, reason: str, message: str = "") -> dict:
    return {
        "name": c["name"],
        "image": c.get("image", ""),
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": 0,
        "state": {"waiting": {"reason": reason, **({"message": message} if message else {})}},
    }


def _write_items(path: Path, data: dict[str, str], items: list[dict] | None) -> None:
    pairs = [(it["key"], it["path"]) for it in items] if items else [(k, k) for k in data]
    for key, rel in pairs:
        if key in data:
            target = path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(data[key])


def _sandbox_script(
    hosts: Path, hostname: str, mounts: list[tuple[str, str, bool]], workdir: str
) -> str:
    """Shell run inside the pod's new mount+UTS namespaces before ``exec``-ing the command."""
    q = shlex.quote
    lines = ["set -e", f"mount --bind {q(str(hosts))} /etc/hosts", f"hostname {q(hostname[:63])}"]
    for src, dst, ro in mounts:
        lines.append(
            f"if [ -d {q(src)} ]; then mkdir -p {q(dst)}; "
            f'else mkdir -p "$(dirname {q(dst)})"; [ -e {q(dst)} ] || : > {q(dst)}; fi'
        )
        lines.append(f"mount --bind {q(src)} {q(dst)}")
        if ro:
            lines.append(f"mount -o remount,bind,ro {q(dst)}")
    lines.append(f"mkdir -p {q(workdir)}; cd {q(workdir)}")
    lines.append('exec "$@"')
    return "\n".join(lines)


# -------------------------------------------------------------- log endpoint
def start_log_server(agent: Agent) -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet
            log.debug(fmt, *args)

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            parts = url.path.strip("/").split("/")
            if len(parts) == 1 and parts[0] in ("healthz", "readyz"):
                return self._send(200, b"ok")
            if len(parts) != 4 or parts[0] != "containerLogs":
                return self._send(404, b"not found")
            _, ns, pod, container = parts
            q = urllib.parse.parse_qs(url.query)
            path = container_log_path(agent.pods_dir, ns, pod, container)
            if not path.exists():
                return self._send(404, f"no log for {ns}/{pod}/{container}".encode())
            data = path.read_bytes()
            if "tailLines" in q:
                n = int(q["tailLines"][0])
                lines = data.splitlines(keepends=True)
                data = b"".join(lines[-n:]) if n else b""
            if "limitBytes" in q:
                data = data[: int(q["limitBytes"][0])]
            follow = q.get("follow", ["false"])[0] == "true"
            if not follow:
                return self._send(200, data)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            pos = path.stat().st_size
            self._chunk(data)
            with open(path, "rb") as f:
                f.seek(pos)
                while not agent.stopping.is_set():
                    chunk = f.read(65536)
                    if chunk:
                        self._chunk(chunk)
                        continue
                    runner = next(
                        (
                            r
                            for r in list(agent.pods.values())
                            if r.namespace == ns and r.name == pod
                        ),
                        None,
                    )
                    st = runner.statuses.get(container, {}) if runner else {}
                    if runner is None or "running" not in st.get("state", {}):
                        rest = f.read()
                        if rest:
                            self._chunk(rest)
                        break
                    time.sleep(0.2)
            self._chunk(b"")

        def _chunk(self, b: bytes) -> None:
            self.wfile.write(f"{len(b):x}\r\n".encode() + b + b"\r\n")
            self.wfile.flush()

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", agent.args.kubelet_port), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(agent.args.tls_cert, agent.args.tls_key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="log-server").start()


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
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(threadName)s %(message)s"
    )
    Agent(args).run()


if __name__ == "__main__":
    main()
