"""Fault injection and health waits of the test cluster's components (a mixin of
:class:`~._cluster.Cluster`): ``kill -9`` one, start it again, wait until it answers."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

from . import _procs
from ._plumbing import ClusterError, _wait


class Faults:
    """kill/restart/dead/wait_healthy for :class:`~._cluster.Cluster`."""

    def kill(self, name: str) -> None:
        """``kill -9`` component ``name`` (its process group) and reap it; :meth:`restart`
        starts it again. Only for a cluster this process started."""
        if name not in self._spawned:
            raise ClusterError(f"{name!r} is not a component this process started")
        pid = self.pids.get(name)
        if pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            p = self._popen.get(name)
            if p is not None:
                p.wait(timeout=30)
            _wait(lambda: not _procs.group_alive(pid), 30, f"{name}'s processes gone")
        self.pids.pop(name, None)
        self._popen.pop(name, None)
        self._save()

    def restart(self, name: str, timeout: float = 120) -> None:
        """Start component ``name`` again with the argv and environment it first had (after
        :meth:`kill`, or a crash) and wait until its health endpoint answers, as
        :meth:`start` does. The node agent is not restartable: it owns its pods."""
        if name == "node-agent" or name not in self._spawned:
            raise ClusterError(f"{name!r} cannot be restarted")
        if self.pids.get(name) and _procs.alive(self.pids[name]):
            raise ClusterError(f"{name} is still running; kill() it first")
        argv, env = self._spawned[name]
        self._spawn(name, argv, env)
        self.wait_healthy(name, timeout)
        if name == "kueue":  # a fault before its visibility server is up would end it
            with self.api_client() as api:
                self._wait_kueue_serving(api, time.monotonic() + timeout)

    def dead(self) -> list[str]:
        """The components whose process has exited (none, on a healthy cluster)."""
        return [n for n, p in self._popen.items() if p.poll() is not None]

    def wait_healthy(self, name: str, timeout: float = 120) -> None:
        """Until component ``name``'s health endpoint answers 200 (raises if it exits)."""
        p, ca = self.ports, self.workdir / "pki" / "ca.crt"
        if name == "etcd":
            self._wait_http(name, f"http://127.0.0.1:{p['etcd']}/health", timeout)
        elif name == "kube-apiserver":
            self._wait_https(name, f"{self.server}/readyz", timeout, ca=ca)
        elif name == "kube-controller-manager":
            self._wait_https(name, f"https://127.0.0.1:{p['kcm']}/healthz", timeout, ca=None)
        elif name == "kube-scheduler":
            self._wait_https(name, f"https://127.0.0.1:{p['scheduler']}/healthz", timeout, ca=None)
        elif name == "kueue":
            self._wait_http(name, f"http://127.0.0.1:{p['kueue-health']}/readyz", timeout)
        else:
            raise ClusterError(f"no health endpoint known for {name!r}")

    def _check_all(self) -> None:
        for name in self._popen:
            self._check_running(name)

    def _wait_http(self, name: str, url: str, timeout: float, ctx=None) -> None:
        def ok() -> bool:
            self._check_running(name)
            try:
                with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
                    return r.status == 200
            except (urllib.error.URLError, OSError):
                return False

        _wait(ok, timeout, f"{name} at {url}")

    def _wait_https(self, name: str, url: str, timeout: float, ca: Path | None) -> None:
        if ca is None:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx = ssl.create_default_context(cafile=str(ca))
        self._wait_http(name, url, timeout, ctx)
