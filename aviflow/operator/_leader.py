"""Leader election on a ``coordination.k8s.io`` Lease, so that several controllers can run
and one acts: the Kubernetes client's own ``leaderelection`` (client-go's semantics: a lease
duration, a renew deadline shorter than it, a retry period), on a Lease in the control
plane's namespace, through our API client.

Fencing: a leader may write (run-store events, Kubernetes objects) only while
:meth:`Leadership.holds` says so, which is until ``renew_deadline`` after the start of its
last successful renewal. Another candidate takes the lease only ``lease_duration`` after it
last saw it change, and ``renew_deadline < lease_duration``, so a deposed leader has
stopped writing before the next one starts (``lease_duration - renew_deadline`` is the
margin for a write already under way). A leader that cannot renew stops, and its process
exits to start again as a candidate.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger("aviflow.operator.leader")
LEASE = "aviflow-controller"


@dataclass(frozen=True)
class Timing:
    """Seconds, as client-go's ``LeaderElectionConfig`` (its defaults: 15, 10, 2); the
    lease's duration is whole seconds (the Lease's ``leaseDurationSeconds``)."""

    lease_duration: int = 15
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if int(self.lease_duration) != self.lease_duration:
            raise ValueError(f"the lease duration is whole seconds; got {self.lease_duration}")
        if not self.lease_duration > self.renew_deadline > 1.2 * self.retry_period >= 1.2:
            raise ValueError(
                "leader election needs lease duration > renew deadline > 1.2 x retry period "
                f">= 1.2 s; got {self.lease_duration}, {self.renew_deadline}, "
                f"{self.retry_period}"
            )


class _Lock(LeaseLock):
    """The library's Lease lock, through ``api`` (it would use the default client)."""

    def __init__(self, api: client.ApiClient, name: str, namespace: str, identity: str) -> None:
        super().__init__(name, namespace, identity)  # type: ignore[no-untyped-call]
        self.api_instance = client.CoordinationV1Api(api)


class _Election(leaderelection.LeaderElection):
    """Records when each successful acquire or renewal began (the fence's clock)."""

    def __init__(self, config: Any, renewed: Callable[[float], None]) -> None:
        super().__init__(config)  # type: ignore[no-untyped-call]
        self._renewed = renewed

    def try_acquire_or_renew(self) -> bool:
        began = time.monotonic()
        ok = bool(super().try_acquire_or_renew())  # type: ignore[no-untyped-call]
        record = self.observed_record
        if (
            ok
            and record is not None
            and record.holder_identity == self.election_config.lock.identity
        ):
            self._renewed(began)
        return ok


class Leadership:
    """One candidate for the Lease ``name`` in ``namespace``: :meth:`run` blocks, calling
    ``lead`` (in a thread) once it holds the lease and returning when it has lost it."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        identity: str,
        timing: Timing | None = None,
        name: str = LEASE,
    ) -> None:
        self.api, self.namespace, self.identity, self.name = api, namespace, identity, name
        self.timing = timing or Timing()
        self._renewed_at: float | None = None
        self._lock = threading.Lock()
        self._lost = threading.Event()

    def holds(self) -> bool:
        """Whether this candidate may write now: it holds the lease, renewed less than the
        renew deadline ago."""
        with self._lock:
            at = self._renewed_at
        return (
            at is not None
            and not self._lost.is_set()
            and time.monotonic() - at < self.timing.renew_deadline
        )

    def _renewed(self, began: float) -> None:
        with self._lock:
            self._renewed_at = began

    def run(self, lead: Callable[[], None]) -> None:
        """Waits for the lease, leads, and returns once a renewal has failed for the renew
        deadline (the caller stops and exits)."""
        t = self.timing
        config = electionconfig.Config(  # type: ignore[no-untyped-call]
            _Lock(self.api, self.name, self.namespace, self.identity),
            lease_duration=int(t.lease_duration),
            renew_deadline=t.renew_deadline,
            retry_period=t.retry_period,
            onstarted_leading=lead,
            onstopped_leading=self._lost.set,
        )
        log.info("%s: waiting for the lease %s/%s", self.identity, self.namespace, self.name)
        _Election(config, self._renewed).run()  # type: ignore[no-untyped-call]
        self._lost.set()
        log.warning("%s: lost the lease %s/%s", self.identity, self.namespace, self.name)

    def release(self) -> None:
        """Gives the lease up at once (a clean stop), so that the next candidate need not
        wait out its duration. Only after this candidate has stopped writing."""
        self._lost.set()
        api = client.CoordinationV1Api(self.api)
        try:
            lease = api.read_namespaced_lease(self.name, self.namespace, _request_timeout=10)
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            lease.spec.holder_identity = None
            api.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=10)
            log.info("%s: released the lease %s/%s", self.identity, self.namespace, self.name)
        except ApiException as exc:  # it expires on its own
            log.warning("could not release the lease %s: %s", self.name, exc.reason)
