"""``python -m aviflow.operator --settings cluster.yaml``: run the TrainJob controller until
SIGTERM/SIGINT. It needs the Kubernetes API (kubeconfig or in-cluster) and the run store
mounted where the settings' ``runs.localPath`` says, whose jobs of an earlier layout it moves in
when it starts (:meth:`RunStore.migrate_legacy <aviflow.store.RunStore.migrate_legacy>`).

Several may run at once (the chart runs two): they elect a leader on the Lease
``aviflow-controller`` in the settings' namespace, and only the leader reconciles. A leader
that loses the lease exits (status 1) to start again as a candidate; SIGTERM releases it, so
that the next one takes over at once. With ``--health-port``, ``GET /healthz`` there answers
503 once a reconcile or the ticker has hung for ``--stall-after`` seconds (the chart's
liveness probe: a hung leader would otherwise keep its lease)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import uuid

from aviflow.errors import AviflowError
from aviflow.k8s.client import api_client
from aviflow.k8s.settings import ClusterSettings
from aviflow.operator import _health
from aviflow.operator._controller import Controller
from aviflow.operator._leader import LEASE, Leadership, Timing
from aviflow.operator._orphans import SUBMISSION_GRACE
from aviflow.store import RunStore

# A new TrainJob's first reconcile is a few API calls in a row (its Service, NetworkPolicy,
# Job, status): a burst of submissions waits on these in turn (bench/admission.py: 20 jobs
# at once took 1.8 s to their Jobs with 4 workers, 0.6 s with 16).
WORKERS = 16
# Every API call of a reconcile has a timeout (apiTimeout; 60 s for a pod's log): one that
# has run this long is stuck.
STALL_AFTER = 300.0
log = logging.getLogger("aviflow.operator")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aviflow.operator", description=__doc__)
    parser.add_argument("--settings", help="the kubernetes settings (YAML); default: built-in")
    parser.add_argument("--kubeconfig", help="default: KUBECONFIG, ~/.kube/config, in-cluster")
    parser.add_argument(
        "--workers",
        type=int,
        default=WORKERS,
        help="reconciles at once (each mostly waits on the API server)",
    )
    parser.add_argument("--tick", type=float, default=1.0, help="seconds between time checks")
    parser.add_argument(
        "--resync",
        type=float,
        default=30.0,
        help="seconds between resyncs (each cached object handed back; pending submissions read)",
    )
    parser.add_argument(
        "--submission-grace",
        type=float,
        default=SUBMISSION_GRACE,
        help="seconds after which a run directory whose TrainJob was never created is failed "
        "(longer than aviflow-api's submit may take: two creates of apiTimeout each)",
    )
    lease = Timing()
    parser.add_argument(
        "--no-leader-elect",
        dest="leader_elect",
        action="store_false",
        help="act at once, without the lease (only where no other controller runs)",
    )
    parser.add_argument("--lease", default=LEASE, help="the Lease's name (one per release)")
    parser.add_argument("--lease-duration", type=int, default=lease.lease_duration)
    parser.add_argument("--renew-deadline", type=float, default=lease.renew_deadline)
    parser.add_argument("--retry-period", type=float, default=lease.retry_period)
    parser.add_argument(
        "--health-port",
        type=int,
        default=None,
        help="serve GET /healthz on this port (the liveness probe); default: none",
    )
    parser.add_argument(
        "--health-host",
        default="",
        help="the address /healthz listens on (the chart: the pod's IP); default: all",
    )
    parser.add_argument(
        "--stall-after",
        type=float,
        default=STALL_AFTER,
        help="seconds after which a running reconcile, or a ticker that has not gone "
        "round, makes /healthz answer 503",
    )
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("leaderelection").setLevel(logging.WARNING)  # a line per renewal
    try:
        timing = Timing(ns.lease_duration, ns.renew_deadline, ns.retry_period)
        settings = ClusterSettings.load(ns.settings) if ns.settings else ClusterSettings()
        # three per worker (a job's Job, Service and NetworkPolicy are created at once), and
        # one per watch: 4 informers in each jobs' namespace
        connections = 3 * ns.workers + 4 * len(settings.job_namespaces()) + 2
        api = api_client(ns.kubeconfig, connections=connections)
        store = RunStore(settings.runs.local_path)
        moved = store.migrate_legacy()  # the explicit step: no read of the store migrates
    except (AviflowError, ValueError, OSError) as exc:
        print(f"aviflow.operator: {exc}", file=sys.stderr)
        return 2
    if moved:
        log.info("moved %d jobs of an earlier layout into %s", len(moved), store.root)
    identity = f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    leader = (
        Leadership(api, settings.namespace, identity, timing, ns.lease) if ns.leader_elect else None
    )
    controller = Controller(
        api,
        settings,
        store,
        workers=ns.workers,
        tick=ns.tick,
        resync=ns.resync,
        fence=leader.holds if leader else None,
        submission_grace=ns.submission_grace,
    )
    if ns.health_port is not None:
        try:
            _health.serve(
                ns.health_port, lambda: controller.health(ns.stall_after), host=ns.health_host
            )
        except OSError as exc:
            print(
                f"aviflow.operator: cannot serve /healthz on {ns.health_port}: {exc}",
                file=sys.stderr,
            )
            return 2
    done = threading.Event()
    failed: list[str] = []

    def lead() -> None:
        try:
            controller.start()
        except TimeoutError as exc:  # the library stops leading, run() returns
            failed.append(str(exc))
            raise
        log.info("%s leads", identity)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    lost = threading.Event()
    if leader is None:
        try:
            lead()
        except TimeoutError:
            print(f"aviflow.operator: {failed[0]}", file=sys.stderr)
            return 2
    else:

        def elect() -> None:
            try:
                leader.run(lead)
            except Exception as exc:  # the election itself failed: stop, say why, start again
                log.exception("leader election failed")
                failed.append(f"leader election failed: {exc!r}")
            finally:
                lost.set()
                done.set()

        threading.Thread(target=elect, name="leader-election", daemon=True).start()
    done.wait()
    controller.stop()
    if lost.is_set():
        print(f"aviflow.operator: {failed[0] if failed else 'lost the lease'}", file=sys.stderr)
        return 1
    if leader is not None and leader.holds():
        leader.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
