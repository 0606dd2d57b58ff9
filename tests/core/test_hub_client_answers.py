"""Who answered: the notebook's client of aviflow-api (:class:`aviflow.backends.hub.HubBackend`)
tells aviflow-api's own refusals (its JSON error body) from answers the hub or its proxy give
in its place while the hub restarts, which it tries again (a real HTTP server on a free port,
answering as each would)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from aviflow.backends import hub
from aviflow.backends.hub import HubBackend
from aviflow.bundle import CodeBundle
from aviflow.errors import AccessDenied, BackendUnavailable
from aviflow.spec import TrainJob

HUB_403 = (403, "text/html", b"<html><title>403: Forbidden</title>'_xsrf' argument missing</html>")
API_403 = (
    403,
    "application/json",
    json.dumps({"status": 403, "error": "AccessDenied", "message": "this token lacks the scope "
                "custom:aviflow-jobs:submit", "problems": []}).encode(),
)  # fmt: skip
MADE = (201, "application/json", b'{"id": "t-1"}')


class Answers:
    """A server that answers each request with the next of ``script``; records each
    request's (method, path, Idempotency-Key)."""

    def __init__(self) -> None:
        self.script: list[tuple[int, str, bytes]] = []
        self.seen: list[tuple[str, str, str | None]] = []
        answers = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                answers.seen.append(("POST", self.path, self.headers.get("Idempotency-Key")))
                status, kind, body = answers.script.pop(0)
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/aviflow-api/"


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> Iterator[Answers]:
    monkeypatch.setattr(hub, "SUBMIT_PAUSE", 0.0)
    found = Answers()
    thread = threading.Thread(target=found.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        found.server.shutdown()
        found.server.server_close()
        thread.join(10)


def job() -> tuple[TrainJob, CodeBundle]:
    spec = {"queue": "q", "gpusPerNode": 1, "script": "1"}
    return TrainJob.from_dict({"metadata": {"name": "t"}, "spec": spec}), CodeBundle({})


def test_a_403_the_hub_gives_in_aviflow_apis_place_is_tried_again_as_one_submission(
    answers: Answers,
) -> None:
    client = HubBackend(answers.url, "tok")
    answers.script = [HUB_403, MADE]
    assert client.submit(*job()) == "t-1"
    (_, path, key), again = answers.seen
    assert path == "/services/aviflow-api/api/v1/jobs" and key and again == ("POST", path, key)
    answers.script = [HUB_403] * 3
    with pytest.raises(BackendUnavailable) as why:
        client.submit(*job())
    assert str(why.value) == (
        "aviflow-api is not reachable through the hub right now (POST jobs: 403 Forbidden); "
        "try again in a few seconds"
    )
    assert len(answers.seen) == 5


def test_aviflow_apis_own_403_is_its_refusal_and_is_not_tried_again(answers: Answers) -> None:
    answers.script = [API_403]
    with pytest.raises(AccessDenied) as why:
        HubBackend(answers.url, "tok").submit(*job())
    assert str(why.value) == "this token lacks the scope custom:aviflow-jobs:submit"
    assert len(answers.seen) == 1
