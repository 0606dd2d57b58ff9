"""aviflow-api under its users' load, behind the real hub and proxy: what N open sidebars and
panels cost, and where the knee is.

A real JupyterHub (configurable-http-proxy, the shared-password login, aviflow-api on the
local backend) is started on free ports in a temporary directory. N users each keep what
their browser keeps open, every ``--period`` seconds (2 s, as the sidebar and the panel):

- the sidebar: ``GET jobs?limit=200&user=<me>`` and ``GET queues`` (what the server extension asks
  aviflow-api for its feed and its queue bars);
- the panel of one job: ``GET jobs/{id}/status`` and ``GET jobs/{id}/metrics?since=<cursor>``
  (the team's one real job: every user is an admin of the team, so that each may read it);

and at the start of each cell 10 of them submit a job at once (a burst; cancelled at its end).
The ledger holds 10, 1,000 or 10,000 jobs (rows written into it before the cell; each user's
listing shows at most its 200 newest). For each (users, jobs) cell it prints requests/s
offered and done, p50 and p99 latency of the reads and of the burst's submissions, errors,
aviflow-api's resident memory and its CPU time per user per minute (the cost per user).

The load generator shares the machine's cores with the hub, the proxy and aviflow-api, as a
test machine would; a cell whose done rate falls under its offered rate is past the knee.

    .venv/bin/python bench/api_load.py [--users 10,100,500] [--jobs 10,1000,10000]
                                        [--seconds 20] [--period 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _paths  # noqa: F401  (before the first test-tree import)
import psutil
import requests
import yaml
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from aviflow.backends.local import LocalBackend
from aviflow.records import JobState, JobSummary
from aviflow_hub.ledger.store import Ledger
from aviflow_hub.local import hub_command
from aviflow_testcluster import free_ports

PASSWORD = "aviflow-bench-pw"
TEAM, QUEUE, GROUP = "team-a", "queue-a", "a"
BURST = 10
SCRIPT = "import time\ntime.sleep(60)\n"


def config(users: list[str], data: Path) -> dict[str, Any]:
    ports = free_ports(4)
    return {
        "hub": {
            "bind": "127.0.0.1",
            "port": ports[0],
            "hubPort": ports[1],
            "proxyApiPort": ports[2],
            "dataDir": str(data),
            "spawner": "local",
            "admins": [],
            "groups": {GROUP: users},
        },
        "auth": {"type": "dev", "dev": {"userPassword": PASSWORD}},
        # team admins all, so that each one's panel may follow the team's one job
        "teams": [
            {
                "name": TEAM,
                "groups": [GROUP],
                "adminGroups": [GROUP],
                "queue": QUEUE,
                "gpuQuota": 8,
            }
        ],
        "profiles": [],
        "culler": {"enabled": False},
        "api": {
            "bind": "127.0.0.1",
            "port": ports[3],
            "backend": "local",
            "local": {"capacity": 1},
            "ingestEvery": 1.0,
        },
    }


@dataclass
class Hub:
    url: str
    proc: psutil.Popen
    data: Path

    @property
    def api(self) -> str:
        return f"{self.url}/services/aviflow-api/api/v1/"

    def api_process(self) -> psutil.Process:
        for child in self.proc.children(recursive=True):
            if "aviflow_hub.service" in " ".join(child.cmdline()):
                return child
        raise RuntimeError("aviflow-api is not among the hub's processes")


def start_hub(work: Path, users: list[str]) -> Hub:
    cfg = config(users, work / "state")
    path = work / "hub.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    argv, env, cwd = hub_command(path, sys.executable)
    cwd.mkdir(parents=True, exist_ok=True)
    with (work / "hub.log").open("wb") as log:
        proc = psutil.Popen(argv, env=env, cwd=cwd, stdout=log, stderr=log, start_new_session=True)
    hub = Hub(f"http://127.0.0.1:{cfg['hub']['port']}", proc, cwd)
    deadline = time.monotonic() + 240
    for url in (f"{hub.url}/hub/api/", hub.api + "openapi.json"):
        while True:
            try:
                if requests.get(url, timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                stop(hub)
                raise RuntimeError(f"the hub did not start:\n{(work / 'hub.log').read_text()}")
            time.sleep(0.5)
    return hub


def stop(hub: Hub) -> None:
    family = hub.proc.children(recursive=True)
    hub.proc.terminate()
    try:
        hub.proc.wait(90)
    except psutil.TimeoutExpired:
        hub.proc.kill()
    _gone, alive = psutil.wait_procs(family, timeout=30)
    for p in alive:
        p.kill()


def token(hub: Hub, user: str) -> str:
    body = {"auth": {"username": user, "password": PASSWORD}, "note": "bench"}
    r = requests.post(f"{hub.url}/hub/api/users/{user}/tokens", json=body, timeout=120)
    r.raise_for_status()
    return str(r.json()["token"])


def fill_ledger(hub: Hub, users: list[str], total: int, have: int) -> None:
    """Finished jobs of the users, round robin, until the ledger holds ``total``."""
    ledger = Ledger(f"sqlite:///{hub.data / 'aviflow-ledger.sqlite'}")
    now = time.time()
    for i in range(have, total):
        ledger.record_job(
            JobSummary(
                id=f"old-{i:06d}-{uuid.uuid4().hex[:8]}",
                name=f"old-{i}",
                user=users[i % len(users)],
                team=TEAM,
                queue=QUEUE,
                nodes=1,
                gpus_per_node=1,
                state=JobState.SUCCEEDED,
                attempt=1,
                submitted=now - 86400 + i,
                updated=now - 86400 + i + 60,
                finished=now - 86400 + i + 60,
                gpu_seconds=60.0,
            )
        )


@dataclass
class Tally:
    reads: list[float] = field(default_factory=list)
    submits: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


async def call(
    http: AsyncHTTPClient, tally: Tally, url: str, tok: str, body: bytes | None = None
) -> Any:
    method = "GET" if body is None else "POST"
    started = time.perf_counter()
    try:
        resp = await http.fetch(
            HTTPRequest(
                url,
                method=method,
                body=body,
                headers={"Authorization": f"token {tok}", "Content-Type": "application/json"},
                request_timeout=60,
            )
        )
    except HTTPClientError as exc:
        tally.error(str(exc.code))
        return None
    except Exception as exc:  # a refused or reset connection: counted, never fatal
        tally.error(type(exc).__name__)
        return None
    (tally.submits if body is not None else tally.reads).append(time.perf_counter() - started)
    return json.loads(resp.body)


async def user_loop(
    http: AsyncHTTPClient,
    hub: Hub,
    user: str,
    tok: str,
    job: str,
    until: float,
    period: float,
    t: Tally,
) -> int:
    cursor, done = 0, 0
    while time.monotonic() < until:
        began = time.monotonic()
        await call(http, t, hub.api + f"jobs?limit=200&user={user}", tok)
        await call(http, t, hub.api + "queues", tok)
        await call(http, t, hub.api + f"jobs/{job}/status", tok)
        page = await call(http, t, hub.api + f"jobs/{job}/metrics?since={cursor}", tok)
        if page is not None:
            cursor = int(page["next"])
        done += 4
        await asyncio.sleep(max(0.0, period - (time.monotonic() - began)))
    return done


async def cell(
    hub: Hub, tokens: dict[str, str], jobs: dict[str, str], seconds: float, period: float
) -> tuple[Tally, int, list[str]]:
    AsyncHTTPClient.configure(None, max_clients=max(10, len(tokens)))
    http = AsyncHTTPClient()
    tally = Tally()
    spec = {"metadata": {"name": "burst"}, "spec": {"script": SCRIPT, "queue": QUEUE}}
    body = json.dumps({"spec": spec}).encode()
    burst = [
        call(http, tally, hub.api + "jobs", tok, body) for tok in list(tokens.values())[:BURST]
    ]
    until = time.monotonic() + seconds
    loops = [
        user_loop(http, hub, user, tok, jobs[user], until, period, tally)
        for user, tok in tokens.items()
    ]
    got = await asyncio.gather(*burst, *loops)
    submitted = [g["id"] for g in got[: len(burst)] if isinstance(g, dict) and "id" in g]
    return tally, sum(g for g in got[len(burst) :] if isinstance(g, int)), submitted


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", default="10,100,500")
    parser.add_argument("--jobs", default="10,1000,10000")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--period", type=float, default=2.0)
    ns = parser.parse_args(argv)
    counts = [int(n) for n in ns.users.split(",")]
    sizes = [int(n) for n in ns.jobs.split(",")]
    users = [f"user{i:03d}" for i in range(max(counts))]
    rows = []
    with tempfile.TemporaryDirectory(prefix="aviflow-load-", ignore_cleanup_errors=True) as tmp:
        hub = start_hub(Path(tmp), users)
        try:
            print(f"hub at {hub.url}; {len(users)} users' tokens...", file=sys.stderr)
            tokens = {u: token(hub, u) for u in users}
            # each user's panel follows one finished job of its own (a real one, with metrics)
            spec = {"metadata": {"name": "panel"}, "spec": {"script": "pass\n", "queue": QUEUE}}
            own = requests.post(
                hub.api + "jobs",
                json={"spec": spec},
                headers={"Authorization": f"token {tokens[users[0]]}"},
                timeout=120,
            ).json()["id"]
            api = hub.api_process()
            have = 0
            for size in sizes:
                fill_ledger(hub, users, size, have)
                have = size
                for n in counts:
                    chosen = {u: tokens[u] for u in users[:n]}
                    jobs = {u: own for u in chosen}
                    cpu0, t0 = sum(api.cpu_times()[:2]), time.monotonic()
                    tally, done, burst = asyncio.run(cell(hub, chosen, jobs, ns.seconds, ns.period))
                    wall = time.monotonic() - t0
                    cpu = sum(api.cpu_times()[:2]) - cpu0
                    for job_id in burst:
                        requests.post(
                            hub.api + f"jobs/{job_id}/cancel",
                            json={},
                            headers={"Authorization": f"token {tokens[users[0]]}"},
                            timeout=120,
                        )
                    offered = n * 4 / ns.period
                    rows.append(
                        (
                            n, size, offered, done / wall, pct(tally.reads, 0.5),
                            pct(tally.reads, 0.99), pct(tally.submits, 0.5),
                            pct(tally.submits, 0.99), sum(tally.errors.values()),
                            api.memory_info().rss / 2**20, cpu / wall * 60 / n,
                        )
                    )  # fmt: skip
                    print(rows[-1], tally.errors or "", file=sys.stderr)
        finally:
            stop(hub)
            backend = LocalBackend(root=hub.data / "runs", capacity=1)
            for job_id in backend.list_ids():  # supervisors outlive the hub: end them
                if not backend.status(job_id).state.is_finished():
                    backend.cancel(job_id)
    print(
        f"\n{'users':>5} {'jobs':>6} {'offered/s':>9} {'done/s':>7} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'submit p50':>10} {'submit p99':>10} {'errors':>6} {'api MiB':>7} "
        f"{'api CPU s/user/min':>18}"
    )
    for r in rows:
        print(
            f"{r[0]:>5} {r[1]:>6} {r[2]:>9.0f} {r[3]:>7.1f} {r[4]:>7.0f} {r[5]:>7.0f} "
            f"{r[6]:>10.0f} {r[7]:>10.0f} {r[8]:>6} {r[9]:>7.0f} {r[10]:>18.3f}"
        )
    knee = next((r for r in rows if r[3] < 0.9 * r[2] or r[8]), None)
    print(
        "\nknee: none in these cells"
        if knee is None
        else f"\nknee: at {knee[0]} users with {knee[1]} jobs (done {knee[3]:.0f}/s of "
        f"{knee[2]:.0f}/s offered, {knee[8]} errors)"
    )
    print(f"median read p50 over the cells: {statistics.median(r[4] for r in rows):.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
