"""Running code in a kernel of a single-user server, as a notebook's browser does: the
Jupyter REST API and the kernel's websocket channels (``websocket-client``). Shared by the
hub tests (``run_in_kernel`` fixture) and the chart's install test."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import requests
import websocket


def message(code: str, session: str) -> dict[str, Any]:
    return {
        "header": {
            "msg_id": uuid.uuid4().hex,
            "msg_type": "execute_request",
            "session": session,
            "username": "test",
            "version": "5.3",
            "date": datetime.now(UTC).isoformat(),
        },
        "parent_header": {},
        "metadata": {},
        "channel": "shell",
        "buffers": [],
        "content": {
            "code": code,
            "silent": False,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        },
    }


def start_kernel(base: str, token: str) -> str:
    """A new kernel of the server at ``base`` (``.../user/<name>/``): its id."""
    headers = {"Authorization": f"token {token}"}
    r = requests.post(f"{base}api/kernels", json={"name": "python3"}, headers=headers, timeout=120)
    assert r.status_code == 201, (r.status_code, r.text)
    return str(r.json()["id"])


def execute(
    base: str, token: str, kernel: str, code: str, timeout: float = 300
) -> tuple[str, str | None]:
    """Runs ``code`` in a running kernel, as a notebook's cell: its stream output and its
    error (``"Name: value"``), if any."""
    session = uuid.uuid4().hex
    ws_url = (
        base.replace("http://", "ws://", 1) + f"api/kernels/{kernel}/channels?session_id={session}"
    )
    ws = websocket.create_connection(
        ws_url, header=[f"Authorization: token {token}"], timeout=timeout
    )
    try:
        msg = message(code, session)
        ws.send(json.dumps(msg))
        out: list[str] = []
        error: str | None = None
        replied = idle = False
        deadline = time.monotonic() + timeout
        while not (replied and idle):
            assert time.monotonic() < deadline, f"no reply in {timeout}s; output so far {out}"
            reply = json.loads(ws.recv())
            if reply.get("parent_header", {}).get("msg_id") != msg["header"]["msg_id"]:
                continue
            kind, content = reply["msg_type"], reply["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "error":
                error = f"{content['ename']}: {content['evalue']}"
            elif kind == "execute_reply":
                replied = True
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
        return "".join(out), error
    finally:
        ws.close()


def run_in_kernel(base: str, token: str, code: str, timeout: float = 300) -> tuple[str, str | None]:
    """Runs ``code`` in a kernel of its own, then shuts the kernel down."""
    kernel = start_kernel(base, token)
    try:
        return execute(base, token, kernel, code, timeout)
    finally:
        headers = {"Authorization": f"token {token}"}
        requests.delete(f"{base}api/kernels/{kernel}", headers=headers, timeout=120)
