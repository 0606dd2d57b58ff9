"""``PodRunner``: one pod's lifecycle on a fake node, as local processes.

Sandbox directory and pod IP, a private ``/etc/hosts`` (rewritten in place as the
namespace's pods come and go), volumes and config retried until they resolve, init
containers then containers in their own mount+UTS namespaces (``unshare``), each inside its
image when the image is in the agent's OCI layouts (``_oci``; otherwise ``ErrImagePull``, or
the host's root filesystem when the agent runs in host mode), supervision with
``restartPolicy`` and the kubelet's crash-loop back-off (``_agent_backoff``), status through
the status subresource, and deletion (SIGTERM, SIGKILL after the grace period, sweep, final
delete). The environment and volumes are
``EnvMixin`` (``_agent_env``), ``VolumesMixin`` (``_agent_volumes``),
``ImageMixin`` (``_agent_image``) and ``RestartMixin`` (``_agent_backoff``).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kubernetes import client

from . import _oci, _procs
from ._agent_backoff import CrashLoopBackOff, RestartMixin
from ._agent_common import RUNTIME, SETUP_RETRY_SECONDS, PodKilled, log, now, pod_dir, waiting
from ._agent_env import EnvMixin
from ._agent_image import ImageMixin
from ._agent_volumes import VolumesMixin

if TYPE_CHECKING:
    from ._agent import Agent

STATUS_TIMEOUT = 10  # seconds: no status update holds a pod's runner longer


class PodRunner(EnvMixin, VolumesMixin, ImageMixin, RestartMixin, threading.Thread):
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
        # container name -> its unpacked image (None: run on the host, in host mode)
        self.bundles: dict[str, _oci.Bundle | None] = {}
        # the kubelet's crash-loop back-off, and when each container last exited (monotonic)
        self.backoff = CrashLoopBackOff()
        self.exited_at: dict[str, float] = {}
        self.hosts_lock = threading.Lock()
        # set by kill() under cond: from then on no container starts (the agent's stop kills
        # pods from another thread while their runners may be restarting a container)
        self.killed = False
        # a status the API server did not take (it was away): sent again until it does
        self.status_unsent = False
        self.status_tried = 0.0

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
        # labels or deletion may change which Services route here
        self.agent.services.kick()

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
        # Rewrite in place: the file is bind-mounted by inode into running containers. Pod
        # threads and the Service syncer both rewrite it: one writer at a time.
        with self.hosts_lock, open(path, "r+b" if path.exists() else "wb") as f:
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
        self.status_tried = time.monotonic()
        try:
            self.agent.core.patch_namespaced_pod_status(
                self.name, self.namespace, {"status": status}, _request_timeout=STATUS_TIMEOUT
            )
        except client.ApiException as e:
            if e.status in (404, 409):  # gone, or another writer's: nothing to send again
                self.status_unsent = False
                return
            self._unsent(e.reason)
        except Exception as e:  # the API server is away (refused, reset, timed out)
            self._unsent(repr(e))
        else:
            self.status_unsent = False

    def _unsent(self, why: object) -> None:
        """As the kubelet's status manager: a status the API server did not take is sent
        again (:meth:`resend_status`) until it does; a pod that ended while the API server
        was away would otherwise stay Running for ever."""
        if not self.status_unsent:
            log.warning("status of %s/%s not sent (%s); sending it again", self.namespace,
                        self.name, why)  # fmt: skip
        self.status_unsent = True

    def resend_status(self) -> None:
        """Send the status again if the last one was not taken (at most once a second)."""
        if self.status_unsent and time.monotonic() - self.status_tried >= 1.0:
            self.patch_status()

    def set_condition(self, t: str, ok: bool, reason: str = "") -> None:
        status = "True" if ok else "False"
        old = self.conditions.get(t)
        if old and old["status"] == status:
            return
        self.conditions[t] = {"status": status, "ts": now(), "reason": reason}
        if t == "Ready":  # a Service's endpoints are its Ready pods
            self.agent.services.kick()

    # -------------------------------------------------------------- run
    def run(self) -> None:
        try:
            self._run()
        except PodKilled:
            pass
        except Exception:
            log.exception("pod %s/%s crashed the runner", self.namespace, self.name)
            self.phase = "Failed"
            self.patch_status()
        finally:
            self.finished = True
            self.agent.services.kick()
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
            self.init_statuses[c["name"]] = waiting(c, "PodInitializing")
        for c in self.spec["containers"]:
            self.statuses[c["name"]] = waiting(c, "ContainerCreating")
        self.write_hosts()
        self.agent.refresh_hosts(self.namespace)
        self.patch_status()
        if not self.set_up(
            self.mount_volumes, "ContainerCreating", "MountVolume.SetUp failed: "
        ) or not self.set_up(self.check_config, "CreateContainerConfigError"):
            return
        if not self.pull_images():
            return

        # init containers, one after the other (sidecars keep running)
        for c in self.spec.get("initContainers") or []:
            if self.deleting.is_set():
                return
            if c.get("restartPolicy") == "Always":
                self.launch(c, init=True)
                continue
            restarts = 0
            while True:
                code = self.run_to_end(c, init=True, restart_count=restarts)
                if code == 0 or self.deleting.is_set():
                    break
                if self.spec.get("restartPolicy", "Always") == "Never":
                    self.phase = "Failed"
                    self.patch_status()
                    return
                if not self.wait_back_off(c):
                    return
                restarts += 1
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
        while not self.deleting.is_set():
            changed = False
            for c in self.spec["containers"]:
                changed = self.tend(c, policy) or changed
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
                # The pod's end takes every process in it, as a real runtime's PID namespace
                # does: what started a session of its own (torch's ranks under a launcher
                # that was killed) would otherwise outlive the pod.
                _procs.sweep(self.marker)
                self.patch_status()
                return
            if changed:
                self.patch_status()
            else:
                self.resend_status()
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
            self.resend_status()  # the end, when the API server was away as the pod ended
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
        with self.cond:  # no launch() is half done, and none starts after this
            self.killed = True
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
                if p is not None and running and p.returncode is not None:
                    self.record_exit(c, p.returncode, init=init)
        if not self.agent.stopping.is_set() and not self.finished:
            self.patch_status()

    # ------------------------------------------------------- containers
    def run_to_end(self, c: dict, *, init: bool, restart_count: int = 0) -> int:
        p = self.launch(c, init=init, restart_count=restart_count)
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
        self.exited_at[c["name"]] = time.monotonic()
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

    def launch(self, c: dict, *, init: bool = False, restart_count: int = 0) -> subprocess.Popen:
        table = self.init_statuses if init else self.statuses
        name = c["name"]
        log_path = self.dir / "logs" / f"{name}.log"
        try:
            env = self.env_for(c)
            argv = self.argv_for(c, env)
            if not argv and self.bundles.get(name) is None:
                raise ValueError(f"container {name} has no command/args (host mode runs no image)")
        except Exception as e:
            table[name] = waiting(c, "CreateContainerConfigError", str(e))
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
        bundle = self.bundles.get(name)
        if bundle is not None:
            try:
                full = self.image_argv(c, bundle, env, mounts, restart_count)
            except Exception as e:
                table[name] = waiting(c, "CreateContainerConfigError", str(e))
                self.patch_status()
                raise
        else:
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
        with self.cond, open(log_path, "ab") as out:
            if self.killed:
                raise PodKilled(name)
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
        previous = table.get(name, {})
        # the last exit stays visible as lastState, as the kubelet reports it
        last = previous.get("state", {}).get("terminated") or (
            previous.get("lastState", {}).get("terminated") if restart_count else None
        )
        table[name] = {
            "name": name,
            "image": c.get("image", ""),
            "imageID": bundle.digest if bundle is not None else "",
            "containerID": f"{RUNTIME.split(':')[0]}://{self.uid}-{name}-{restart_count}",
            "ready": True,
            "started": True,
            "restartCount": restart_count,
            "state": {"running": {"startedAt": now()}},
            **({"lastState": {"terminated": last}} if last else {}),
        }
        return p

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
                        self.statuses[c["name"]] = waiting(c, reason, message)
                    self.patch_status()
                    reported = message
            self.deleting.wait(SETUP_RETRY_SECONDS)
        return False


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
