"""The nodes' kubelet port: ``/containerLogs/<ns>/<pod>/<container>`` over HTTPS.

Enough for ``kubectl logs`` (plain, ``tailLines``, ``limitBytes``, ``follow``), plus
``/healthz`` and ``/readyz``. It reads the files under the pod sandbox's ``logs/``.
"""

from __future__ import annotations

import http.server
import ssl
import threading
import time
import urllib.parse
from typing import TYPE_CHECKING

from ._agent_common import container_log_path, log

if TYPE_CHECKING:
    from ._agent import Agent


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
