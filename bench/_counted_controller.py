"""``python -m aviflow.operator``, counted: the controller exactly as it runs on a cluster
(its own ``main``, the same arguments), with counters the benchmark reads
(``bench/controller_history.py``). Nothing of the controller changes: the counters wrap
the ``kubernetes`` client's one request method and two of the controller's methods.

- requests: every HTTP request the controller's API client sends, by verb (``WATCH`` for a
  watch, ``LIST`` for a collection ``GET``) and resource;
- ``reconciles``: calls of ``Controller.reconcile`` (one per key a worker takes);
- ``full_reconciles``: those that went past the TrainJob cache to its run directory
  (``Binder.run_dir``): the cost a finished TrainJob must never cause.

``SIGUSR1`` writes them, with a sequence number, to the JSON file ``$BENCH_COUNTS``.

    BENCH_COUNTS=counts.json python bench/_counted_controller.py --settings s.yaml ...
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit


def request_kind(method: str, url: str) -> str:
    """``WATCH trainjobs``, ``LIST pods``, ``PATCH trainjobs/status``, ``POST jobs``..."""
    parts = urlsplit(url)
    segs = [s for s in parts.path.split("/") if s]
    query = {k.lower(): v for k, v in parse_qs(parts.query).items()}
    if "namespaces" in segs and len(segs) > segs.index("namespaces") + 2:
        rest = segs[segs.index("namespaces") + 2 :]
    else:  # cluster-scoped: /api/v1/<res>[/<name>...], /apis/<group>/<version>/<res>...
        rest = segs[2:] if segs[:1] == ["api"] else segs[3:]
    resource = rest[0] if rest else "?"
    if len(rest) > 2:
        resource += "/" + rest[2]
    verb = method.upper()
    if verb == "GET" and [v.lower() for v in query.get("watch", [])] == ["true"]:
        verb = "WATCH"
    elif verb == "GET" and len(rest) == 1:
        verb = "LIST"
    return f"{verb} {resource}"


def main() -> int:
    from kubernetes.client import rest

    from aviflow.operator import __main__ as operator
    from aviflow.operator._binding import Binder
    from aviflow.operator._controller import Controller

    out = Path(os.environ["BENCH_COUNTS"])
    lock = threading.Lock()
    requests: Counter[str] = Counter()
    calls = {"reconciles": 0, "full_reconciles": 0, "seq": 0}

    send = rest.RESTClientObject.request

    def request(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        with lock:
            requests[request_kind(method, url)] += 1
        return send(self, method, url, *args, **kwargs)

    reconcile = Controller.reconcile

    def counted_reconcile(self: Controller, key: str) -> None:
        with lock:
            calls["reconciles"] += 1
        reconcile(self, key)

    run_dir = Binder.run_dir

    def counted_run_dir(self: Binder, cr: Any) -> Any:
        with lock:
            calls["full_reconciles"] += 1
        return run_dir(self, cr)

    def dump(*_: object) -> None:
        with lock:
            calls["seq"] += 1
            data = {**calls, "requests": dict(requests)}
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(out)

    rest.RESTClientObject.request = request  # type: ignore[method-assign]
    Controller.reconcile = counted_reconcile  # type: ignore[method-assign]
    Binder.run_dir = counted_run_dir  # type: ignore[method-assign]
    signal.signal(signal.SIGUSR1, dump)
    return operator.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
