"""The controller's liveness endpoint: ``GET /healthz`` answers 200 ``ok``, or 503 with what
is wrong, one problem a line (:meth:`~aviflow.operator._controller.Controller.health`).

A controller whose reconciles hang keeps renewing its lease (the election runs in a thread
of its own), so the other replica never takes over; the kubelet's liveness probe on this
endpoint restarts it instead, and the restart releases the lease.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PATH = "/healthz"


def serve(port: int, problems: Callable[[], list[str]], host: str = "") -> ThreadingHTTPServer:
    """Answer ``GET /healthz`` on ``port`` (0: a free one, see ``server_port``) from a daemon
    thread; ``shutdown()`` the server to stop."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != PATH:
                self._send(404, f"only {PATH} is served here\n")
                return
            found = problems()
            self._send(503 if found else 200, "".join(f"{p}\n" for p in found) or "ok\n")

        def _send(self, status: int, text: str) -> None:
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a probe every few seconds: nothing worth a log line

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="healthz", daemon=True).start()
    return server
