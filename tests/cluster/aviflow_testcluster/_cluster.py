"""Start and stop a loopback Kubernetes control plane with Kueue and fake nodes.

Components, all local processes on 127.0.0.1 with free ports and generated
certificates: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
Kueue (webhooks served on loopback), and the node agent (``_agent.py``) that
registers the fake nodes and runs their pods as local processes.

>>> cluster = Cluster.start(Path("/tmp/c1"))        # doctest: +SKIP
>>> cluster.kubectl("get", "nodes")                  # doctest: +SKIP
>>> cluster.stop()                                   # doctest: +SKIP

``Cluster.start`` writes ``<workdir>/state.json`` so another process can stop it
(``Cluster.load(workdir).stop()``; that is what ``make cluster-down`` does).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import _build, _cache, _certs, _nodes, _procs
from ._faults import Faults
from ._kueue_process import KueueProcess
from ._plumbing import (
    _CLAIMS_ROOT,
    ClusterError,
    _claim_ip_block,
    _exists,
    _kubeconfig,
    _wait,
    free_ports,
)

K8S_CONTROLLERS = (
    "job-controller",
    "cronjob-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "ttl-after-finished-controller",
    "pod-garbage-collector-controller",
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "persistentvolume-binder-controller",
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
)

DEFAULT_KUEUE_FRAMEWORKS = ("batch/job",)

# Order matters: stop() goes through it backwards.
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kueue",
    "node-agent",
)


PORT_NAMES = (
    "etcd",
    "etcd-peer",
    "apiserver",
    "kcm",
    "scheduler",
    "kueue-webhook",
    "kueue-health",
    "kueue-visibility",
    "kubelet",
)


# Pod Security admission's `restricted` profile, enforced: the label of the namespaces that
# hold users' notebooks and trainer pods.
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


# A component that lost its port between free_ports() and its own bind says one of these.
BIND_FAILURES = ("address already in use", "failed to listen on")
START_ATTEMPTS = 3


_REPO = Path(__file__).resolve().parents[3]
DEFAULT_IMAGES = _REPO / "images" / ".build" / "oci"


@dataclass
class Cluster(KueueProcess, Faults):
    """A running (or stopped) test cluster. Build with :meth:`start` or :meth:`load`."""

    workdir: Path
    id: str
    bin_dir: Path
    ports: dict[str, int]
    pids: dict[str, int] = field(default_factory=dict)
    ip_block: int = 0
    nodes: list[dict] = field(default_factory=list)
    api_services: list[str] = field(default_factory=list)
    # the OCI layout whose images pods run in (images/build.sh), the build cache their layers
    # are unpacked into, and
    # whether a pod whose image is not there runs on the host instead of ErrImagePull
    images: str = ""
    image_cache: str = ""
    host_mode: bool = False
    _popen: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)
    # each component's argv and environment as _spawn started it (restart() starts it again)
    _spawned: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict, repr=False)

    # ----------------------------------------------------------------- paths
    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def logs_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def pods_dir(self) -> Path:
        """Where the node agent keeps each pod's sandbox (logs, volumes, hosts file)."""
        return self.workdir / "agent" / "pods"

    @property
    def kubectl_path(self) -> Path:
        return self.bin_dir / "kubectl"

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env[_procs.MARKER] = self.id
        env["KUBECONFIG"] = str(self.kubeconfig)
        return env

    # ------------------------------------------------------------- helpers
    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        """Run the cluster's kubectl with this kubeconfig; returns the completed process."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        proc = subprocess.run(
            [str(self.kubectl_path), *args],
            input=input,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}):\n"
                f"{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def api_client(self):
        """A new ``kubernetes.client.ApiClient`` for this cluster (admin credentials)."""
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=cfg)
        return client.ApiClient(cfg)

    def read_logs(self, namespace: str, pod: str, container: str | None = None) -> str:
        """A pod container's log (same bytes ``kubectl logs`` serves), from the agent's files."""
        from ._agent_common import container_log_path

        return container_log_path(self.pods_dir, namespace, pod, container).read_text(
            errors="replace"
        )

    def create_namespace(
        self, name: str | None = None, *, labels: dict | None = None, timeout: float = 30
    ) -> str:
        """Create a namespace (unique name by default) and wait until pods can start in it.

        Pods are admitted only once the default ServiceAccount exists (ServiceAccount
        admission), and their service-account volume needs the ``kube-root-ca.crt``
        ConfigMap, which another controller publishes.
        """
        from kubernetes import client

        name = name or f"t-{uuid.uuid4().hex[:10]}"
        with self.api_client() as api:
            core = client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
            _wait(
                lambda: _exists(lambda: core.read_namespaced_service_account("default", name)),
                timeout,
                f"default ServiceAccount in {name}",
            )
            _wait(
                lambda: _exists(lambda: core.read_namespaced_config_map("kube-root-ca.crt", name)),
                timeout,
                f"kube-root-ca.crt in {name}",
            )
        return name

    def processes(self) -> list[int]:
        """Pids of live processes that belong to this cluster (components and pods)."""
        return _procs.marked_pids(self.id, prefix=True)

    # ------------------------------------------------------------ lifecycle
    @classmethod
    def start(
        cls,
        workdir: Path,
        *,
        hgx_nodes: int = 4,
        cpu_nodes: int = 2,
        kueue_frameworks: Iterable[str] = DEFAULT_KUEUE_FRAMEWORKS,
        die_with_parent: bool = False,
        timeout: float = 180,
        log: Callable[[str], None] | None = None,
        images: Path | None = DEFAULT_IMAGES,
        image_cache: Path | None = None,
        host_mode: bool = False,
    ) -> Cluster:
        """Build if needed, then start everything and wait until it is usable.

        ``die_with_parent`` makes the top processes receive SIGKILL if the calling
        process dies (pytest); ``make cluster-up`` leaves it off so they outlive it.
        Pods run inside their images when ``images`` (the OCI layout ``make images``
        writes) has them; any other pod waits with ``ErrImagePull``, unless
        ``host_mode`` lets it run on the host's root filesystem and Python.
        """
        log = log or (lambda m: print(m, file=sys.stderr, flush=True))
        bin_dir = _build.build(log=log)
        workdir = Path(workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        _clear_workdir(workdir)
        for attempt in range(1, START_ATTEMPTS + 1):
            self = cls(
                workdir=workdir,
                id=uuid.uuid4().hex,
                bin_dir=bin_dir,
                ports=dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True)),
            )
            self.ip_block = _claim_ip_block(_CLAIMS_ROOT, self.id)
            self.nodes = [n.to_json() for n in _nodes.default_nodes(hgx_nodes, cpu_nodes)]
            self._die_with_parent = die_with_parent
            self.images = str(images or "")
            self.image_cache = str(image_cache or _cache.cache_root())
            self.host_mode = host_mode
            try:
                self._start(list(kueue_frameworks), timeout, log)
            except BaseException as e:
                lost = self.lost_port() if isinstance(e, ClusterError) else None
                if lost is None or attempt == START_ATTEMPTS:
                    self.dump_logs_tail(log)
                self.stop()
                if lost is None or attempt == START_ATTEMPTS:
                    raise
                log(f"{lost} lost its port to another process; starting again with fresh ports")
                _clear_workdir(workdir)
                continue
            break
        return self

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        env = env or self._env()
        self._spawned[name] = (list(argv), dict(env))
        p = _procs.spawn(
            argv,
            env=env,
            log=self.logs_dir / f"{name}.log",
            cwd=self.workdir,
            die_with_parent=self._die_with_parent,
        )
        self._popen[name] = p
        self.pids[name] = p.pid
        self._save()

    def lost_port(self) -> str | None:
        """The component whose log says it could not bind its port (None: no such line)."""
        for name in COMPONENTS:
            f = self.logs_dir / f"{name}.log"
            with contextlib.suppress(OSError):
                text = f.read_text(errors="replace").lower()
                if any(marker in text for marker in BIND_FAILURES):
                    return name
        return None

    def _check_running(self, name: str) -> None:
        p = self._popen.get(name)
        if p is not None and p.poll() is not None:
            raise ClusterError(f"{name} exited with {p.returncode}; see {self.logs_dir / name}.log")

    def _start(self, frameworks: list[str], timeout: float, log) -> None:
        t0 = time.monotonic()
        d, pki, b = self.workdir, self.workdir / "pki", self.bin_dir
        _certs.generate(pki)
        ca = (pki / "ca.crt").read_bytes()
        kc = _kubeconfig(
            self.server, ca, (pki / "admin.crt").read_bytes(), (pki / "admin.key").read_bytes()
        )
        self.kubeconfig.write_text(yaml.safe_dump(kc))
        self.kubeconfig.chmod(0o600)
        self._save()

        p = self.ports
        etcd_url = f"http://127.0.0.1:{p['etcd']}"
        peer_url = f"http://127.0.0.1:{p['etcd-peer']}"
        self._spawn(
            "etcd",
            [
                str(b / "etcd"),
                "--name=node0",
                f"--data-dir={d / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=node0={peer_url}",
                "--unsafe-no-fsync",
                "--auto-compaction-retention=1",
                "--log-level=warn",
            ],
        )
        self.wait_healthy("etcd", timeout)

        self._spawn(
            "kube-apiserver",
            [
                str(b / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--etcd-prefix=/registry",
                "--bind-address=127.0.0.1",
                f"--secure-port={p['apiserver']}",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                # Nothing removes the not-ready taint this plugin adds (no node-lifecycle
                # controller); the agent reports Ready nodes instead.
                "--disable-admission-plugins=TaintNodesByCondition",
                f"--kubelet-client-certificate={pki / 'admin.crt'}",
                f"--kubelet-client-key={pki / 'admin.key'}",
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                "--kubelet-preferred-address-types=InternalIP",
                "--profiling=false",
                f"--cert-dir={d / 'apiserver-certs'}",
                # Aggregation layer (Kueue's visibility API): the API server proxies with
                # this client cert and these headers; the backend trusts them via the
                # extension-apiserver-authentication ConfigMap the API server publishes.
                f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
                f"--requestheader-allowed-names={_certs.FRONT_PROXY_CLIENT_CN}",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-username-headers=X-Remote-User",
                f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
                f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            ],
        )
        self.wait_healthy("kube-apiserver", timeout)

        common_auth = [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            "--bind-address=127.0.0.1",
        ]
        self._spawn(
            "kube-controller-manager",
            [
                str(b / "kube-controller-manager"),
                *common_auth,
                f"--secure-port={p['kcm']}",
                "--leader-elect=false",
                f"--cert-dir={d / 'kcm-certs'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=false",
                "--controllers=" + ",".join(K8S_CONTROLLERS),
            ],
        )
        sched_cfg = d / "scheduler.yaml"
        sched_cfg.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(self.kubeconfig)},
                    "leaderElection": {"leaderElect": False},
                }
            )
        )
        self._spawn(
            "kube-scheduler",
            [
                str(b / "kube-scheduler"),
                *common_auth[1:],
                f"--config={sched_cfg}",
                f"--secure-port={p['scheduler']}",
                f"--cert-dir={d / 'scheduler-certs'}",
            ],
        )

        self._install_kueue(frameworks)
        self._spawn(
            "node-agent",
            [
                sys.executable,
                "-m",
                "aviflow_testcluster._agent",
                f"--kubeconfig={self.kubeconfig}",
                f"--state-dir={d / 'agent'}",
                f"--cluster-id={self.id}",
                f"--ip-block={self.ip_block}",
                f"--kubelet-port={p['kubelet']}",
                f"--tls-cert={pki / 'kubelet.crt'}",
                f"--tls-key={pki / 'kubelet.key'}",
                f"--nodes={d / 'nodes.json'}",
                f"--kubernetes-port={p['apiserver']}",
                f"--images={self.images}",
                f"--image-cache={self.image_cache}",
                *(["--host-mode"] if self.host_mode else []),
            ],
            env={
                **self._env(),
                "PYTHONPATH": os.pathsep.join(
                    [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]
                ),
            },
        )

        # The agent outlives this launcher under `make cluster-up`; it owns the IP block.
        (_CLAIMS_ROOT / "ip-blocks" / str(self.ip_block)).write_text(
            json.dumps({"pid": self.pids["node-agent"], "id": self.id})
        )

        for name in ("kube-controller-manager", "kube-scheduler", "kueue"):
            self.wait_healthy(name, timeout)
        self._wait_ready(timeout)
        log(
            f"test cluster {self.id[:8]} up in {time.monotonic() - t0:.1f}s "
            f"(KUBECONFIG={self.kubeconfig})"
        )

    def _wait_ready(self, timeout: float) -> None:
        """Nodes Ready, default SA present, Kueue's webhooks answering a dry-run,
        Kueue's visibility APIServices Available."""
        from kubernetes import client

        deadline = time.monotonic() + timeout
        with self.api_client() as api:
            core = client.CoreV1Api(api)

            def nodes_ready() -> bool:
                self._check_all()
                ready = [
                    n
                    for n in core.list_node().items
                    if any(
                        c.type == "Ready" and c.status == "True"
                        for c in (n.status.conditions or [])
                    )
                ]
                return len(ready) == len(self.nodes)

            _wait(nodes_ready, deadline - time.monotonic(), "fake nodes Ready")
            _wait(
                lambda: _exists(lambda: core.read_namespaced_service_account("default", "default")),
                deadline - time.monotonic(),
                "default ServiceAccount",
            )

            self._wait_kueue_serving(api, deadline)

    def dump_logs_tail(self, log, lines: int = 15) -> None:
        """Pass the last ``lines`` of each component's log to ``log``."""
        for name in COMPONENTS:
            f = self.logs_dir / f"{name}.log"
            if f.exists():
                tail = f.read_text(errors="replace").splitlines()[-lines:]
                log(f"--- {name} (last lines of {f})\n" + "\n".join(tail))

    # ----------------------------------------------------------- state file
    def _save(self) -> None:
        state = {
            "workdir": str(self.workdir),
            "id": self.id,
            "bin_dir": str(self.bin_dir),
            "ports": self.ports,
            "pids": self.pids,
            "ip_block": self.ip_block,
            "nodes": self.nodes,
            "images": self.images,
            "image_cache": self.image_cache,
            "host_mode": self.host_mode,
        }
        state["launcher_pid"] = os.getpid()
        tmp = self.workdir / "state.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.rename(self.workdir / "state.json")

    @classmethod
    def load(cls, workdir: Path) -> Cluster:
        state = json.loads((Path(workdir) / "state.json").read_text())
        state.pop("launcher_pid", None)
        state["workdir"] = Path(state["workdir"])
        state["bin_dir"] = Path(state["bin_dir"])
        return cls(**state)

    def stop(self, grace: float = 10) -> list[int]:
        """Stop every component (reverse order), then sweep leftovers; idempotent.

        Returns the pids the final sweep had to kill (should be empty).
        """
        for name in reversed(COMPONENTS):
            pid = self.pids.get(name)
            if not pid:
                continue
            # node-agent kills its pods on SIGTERM; give it the longest grace.
            _procs.stop_group(
                pid, grace * 2 if name == "node-agent" else grace, reap=self._popen.get(name)
            )
        leftovers = _procs.sweep(self.id, prefix=True)
        self.pids.clear()
        self._popen.clear()
        with contextlib.suppress(OSError):
            claim = _CLAIMS_ROOT / "ip-blocks" / str(self.ip_block)
            if claim.exists() and json.loads(claim.read_text()).get("id") == self.id:
                claim.unlink()
        if (self.workdir / "state.json").exists():
            self._save()
        return leftovers


_WORKDIR_ENTRIES = (
    "etcd",
    "pki",
    "logs",
    "agent",
    "apiserver-certs",
    "kcm-certs",
    "scheduler-certs",
    "kubeconfig",
    "state.json",
    "nodes.json",
    "kueue.yaml",
    "scheduler.yaml",
)


def _clear_workdir(workdir: Path) -> None:
    """Remove what a previous (stopped) cluster left in ``workdir``: a fresh etcd each time."""
    import shutil

    for name in _WORKDIR_ENTRIES:
        p = workdir / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
