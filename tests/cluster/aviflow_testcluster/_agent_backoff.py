"""The kubelet's crash-loop back-off, for the node agent's container restarts.

The kubelet (``k8s.io/kubernetes@v1.35.4``, ``pkg/kubelet/kuberuntime/kuberuntime_manager.go``
``doBackOff``, with the ``flowcontrol.Backoff`` that ``pkg/kubelet/kubelet.go`` builds) keys a
back-off entry per pod and container. When a container has exited:

* no entry yet, or the last restart was more than 600 s before this exit (it ran ten
  minutes): a fresh 10 s window starts and the container restarts **at once**;
* the exit is less than the current window ago: it waits, its status is
  ``waiting: CrashLoopBackOff`` with ``back-off <window> restarting failed container=...``;
* otherwise the window doubles (capped at 300 s) and the container restarts.

So the delays between restarts are 0, 10, 20, 40, 80, 160, 300, 300 … seconds (the kubelet
adds no jitter to this back-off).

``RestartMixin`` is the part of ``PodRunner`` that applies it.

>>> go_duration(10), go_duration(80), go_duration(300)
('10s', '1m20s', '5m0s')
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ._agent_common import PodKilled, log

INITIAL_SECONDS = 10.0
MAX_SECONDS = 300.0
STABLE_SECONDS = 600.0  # the kubelet's HasExpiredFunc: a restart this old resets the entry


@dataclass
class _Entry:
    window: float
    last_update: float


class CrashLoopBackOff:
    """Per-container restart back-off on a monotonic clock (``flowcontrol.Backoff``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.entries: dict[str, _Entry] = {}

    def _live(self, key: str, exited_at: float) -> _Entry | None:
        entry = self.entries.get(key)
        if entry is None or exited_at - entry.last_update > STABLE_SECONDS:
            return None
        return entry

    def remaining(self, key: str, exited_at: float) -> float:
        """Seconds this exit must still wait before the restart (0: restart now)."""
        entry = self._live(key, exited_at)
        if entry is None:
            return 0.0
        return max(0.0, entry.window - (self.clock() - exited_at))

    def window(self, key: str) -> float:
        """The current window, as the kubelet's message names it (``back-off 10s``)."""
        entry = self.entries.get(key)
        return entry.window if entry else 0.0

    def restarted(self, key: str, exited_at: float) -> None:
        """Record a restart: the next exit waits the first window, or twice the last one."""
        entry = self._live(key, exited_at)
        window = INITIAL_SECONDS if entry is None else min(entry.window * 2, MAX_SECONDS)
        self.entries[key] = _Entry(window, self.clock())


def go_duration(seconds: float) -> str:
    """Whole seconds the way Go's ``time.Duration.String`` prints them (``1m20s``)."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s"
    return f"{s // 3600}h{s % 3600 // 60}m{s % 60}s"


def crash_loop_message(window: float, container: str, pod: str, ns: str, uid: str) -> str:
    """The kubelet's waiting message (``format.Pod`` is ``name_namespace(uid)``)."""
    return (
        f"back-off {go_duration(window)} restarting failed container={container} "
        f"pod={pod}_{ns}({uid})"
    )


class RestartMixin:
    """``PodRunner``'s restarts; uses its ``procs``, ``statuses``, ``init_statuses``,
    ``backoff``, ``exited_at``, ``deleting``, ``name``, ``namespace``, ``uid``,
    ``record_exit()``, ``launch()`` and ``patch_status()``."""

    def tend(self, c: dict, policy: str) -> bool:
        """Record a container's exit and restart it under ``policy`` once its crash-loop
        back-off allows (the first restart is immediate, as the kubelet's). True if its
        status changed."""
        name = c["name"]
        p = self.procs.get(name)
        if p is None or p.poll() is None:
            return False
        st = self.statuses[name]
        changed = False
        if st.get("state", {}).get("running"):
            self.record_exit(c, p.returncode, init=False)
            changed = True
        if not (policy == "Always" or (policy == "OnFailure" and p.returncode != 0)):
            return changed
        if self.backoff.remaining(name, self.exited_at[name]) > 0:
            return self.show_back_off(c, init=False) or changed
        self.backoff.restarted(name, self.exited_at[name])
        try:
            self.launch(c, restart_count=st.get("restartCount", 0) + 1)
        except PodKilled:
            return changed
        return True

    def show_back_off(self, c: dict, *, init: bool) -> bool:
        """Report ``waiting: CrashLoopBackOff`` with the exit as ``lastState``; False if the
        status already says so."""
        st = (self.init_statuses if init else self.statuses)[c["name"]]
        terminated = st.get("state", {}).get("terminated")
        if terminated is None:
            return False
        message = crash_loop_message(
            self.backoff.window(c["name"]), c["name"], self.name, self.namespace, self.uid
        )
        st["lastState"] = {"terminated": terminated}
        st["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
        log.info("pod %s/%s: %s", self.namespace, self.name, message)
        return True

    def wait_back_off(self, c: dict) -> bool:
        """Wait out a failed init container's back-off (its status says CrashLoopBackOff
        meanwhile). False if the pod is deleted first: deletion wakes the wait."""
        name = c["name"]
        remaining = self.backoff.remaining(name, self.exited_at[name])
        if remaining > 0:
            self.show_back_off(c, init=True)
            self.patch_status()
            if self.deleting.wait(remaining):
                return False
        self.backoff.restarted(name, self.exited_at[name])
        return not self.deleting.is_set()
