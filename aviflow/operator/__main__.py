"""``python -m aviflow.operator --settings cluster.yaml``: run the TrainJob controller until
SIGTERM/SIGINT. It needs the Kubernetes API (kubeconfig or in-cluster) and the run store
mounted where the settings' ``runs.localPath`` says."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from aviflow.errors import AviflowError
from aviflow.k8s.client import api_client
from aviflow.k8s.settings import ClusterSettings
from aviflow.operator._controller import Controller
from aviflow.store import RunStore

# A new TrainJob's first reconcile is a few API calls in a row (its Service, NetworkPolicy,
# Job, status): a burst of submissions waits on these in turn (bench/admission.py: 20 jobs
# at once took 1.8 s to their Jobs with 4 workers, 0.6 s with 16).
WORKERS = 16


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
    parser.add_argument("--resync", type=float, default=30.0, help="seconds between relists")
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = ClusterSettings.load(ns.settings) if ns.settings else ClusterSettings()
        # a connection per worker, and per watch: 4 informers in each jobs' namespace
        connections = ns.workers + 4 * len(settings.job_namespaces()) + 2
        api = api_client(ns.kubeconfig, connections=connections)
        store = RunStore(settings.runs.local_path)
        controller = Controller(
            api, settings, store, workers=ns.workers, tick=ns.tick, resync=ns.resync
        )
        controller.start()
    except (AviflowError, TimeoutError) as exc:
        print(f"aviflow.operator: {exc}", file=sys.stderr)
        return 2
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    controller.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
