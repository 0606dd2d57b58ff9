"""The people and programs of the chart install test (``test_install.py``): a user at the
hub's public address, a hostile job from her notebook and what it must not steer, kubectl
users of two teams, and what a person looks at when the release misbehaves."""

from __future__ import annotations

import html
import json
import re
import sys
from importlib.resources import files
from typing import Any

import requests
from aviflow_kernel import run_in_kernel

from aviflow.store import RunDir
from aviflow_testcluster import Cluster, wait_for

TINY = files("aviflow.examples").joinpath("tiny_regression.py").read_text()


def explain(cluster: Cluster, ns: str) -> str:
    """What a person would look at when the release misbehaves: the controller's log, the
    TrainJobs, Workloads and pods."""
    out = []
    for args in (
        ("logs", "-n", ns, "-l", "app.kubernetes.io/component=controller", "--tail=60"),
        ("logs", "-n", ns, "-l", "app.kubernetes.io/component=hub", "--tail=40"),
        ("get", "trainjobs,workloads,pods,jobs", "-A", "-o", "wide"),
        ("get", "trainjobs", "-A", "-o", "jsonpath={.items[*].status}"),
    ):
        done = cluster.kubectl(*args, check=False)
        out.append(f"$ kubectl {' '.join(args)}\n{done.stdout}{done.stderr}")
    return "\n".join(out)


def until(cluster: Cluster, ns: str, ok: Any, timeout: float, said: str) -> Any:
    try:
        return wait_for(ok, timeout, said)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{explain(cluster, ns)}") from None


def kubectl_json(cluster: Cluster, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


class User:
    """A person at the hub's public address (the proxy's LoadBalancer Service): a token from
    the hub's API with the dev authenticator's password, their notebook server, aviflow-api."""

    def __init__(self, url: str, name: str, password: str) -> None:
        self.url, self.name = url, name
        r = requests.post(
            f"{url}/hub/api/users/{name}/tokens",
            json={"auth": {"username": name, "password": password}, "note": "chart test"},
            timeout=60,
        )
        assert r.status_code == 201, (r.status_code, r.text)
        self.token = r.json()["token"]
        self.headers = {"Authorization": f"token {self.token}"}

    def server(self) -> dict[str, Any] | None:
        r = requests.get(f"{self.url}/hub/api/users/{self.name}", headers=self.headers, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()["servers"].get("")

    def spawn(self, profile: str) -> None:
        r = requests.post(
            f"{self.url}/hub/api/users/{self.name}/server",
            json={"profile": profile},
            headers=self.headers,
            timeout=120,
        )
        assert r.status_code in (201, 202), (r.status_code, r.text)
        wait_for(lambda: (self.server() or {}).get("ready"), 600, "the notebook is ready")

    def stop(self) -> None:
        r = requests.delete(
            f"{self.url}/hub/api/users/{self.name}/server", headers=self.headers, timeout=120
        )
        assert r.status_code in (202, 204), (r.status_code, r.text)
        wait_for(lambda: self.server() is None, 300, "the notebook stopped")

    def api(self, path: str) -> Any:
        r = requests.get(
            f"{self.url}/services/aviflow-api/api/v1/{path}", headers=self.headers, timeout=60
        )
        assert r.status_code == 200, (r.status_code, r.text)
        return r.json()


def kubectl_users_held_to_their_team(
    cluster: Cluster, vision_ns: str, nlp_ns: str, job_id: str
) -> None:
    """With ``kubectlAccess``, a team's members (impersonated: their groups as the
    authenticator names them) may use kubectl in their team's namespace only: bob (nlp)
    can neither read (nor so see the ``spec.env`` of), cancel nor create vision's TrainJobs,
    and the queue policy refuses him vision's queue in his own namespace. Alice (vision)
    reads her team's job, so the refusals are not for want of the object."""
    alice = ("--as=alice", "--as-group=vision")
    bob = ("--as=bob", "--as-group=nlp")
    mine = kubectl_json(cluster, "get", "trainjob", job_id, "-n", vision_ns, *alice)
    assert mine["spec"]["queue"] == "vision"
    for args, verb in (
        (("get", "trainjobs", "-n", vision_ns), "list"),
        (("get", "trainjob", job_id, "-n", vision_ns, "-o", "json"), "get"),
        (("annotate", "trainjob", job_id, "-n", vision_ns, "aviflow.dev/cancel=mine"), "get"),
    ):
        done = cluster.kubectl(*args, *bob, check=False)
        assert done.returncode != 0, done.stdout
        assert f'User "bob" cannot {verb} resource "trainjobs"' in done.stderr, done.stderr

    def trainjob(ns: str) -> str:
        return json.dumps(
            {
                "apiVersion": "aviflow.dev/v1",
                "kind": "TrainJob",
                "metadata": {
                    "name": "not-yours",
                    "namespace": ns,
                    "annotations": {"aviflow.dev/user": "bob"},
                },
                "spec": {"queue": "vision", "nodes": 1, "gpusPerNode": 1, "script": TINY},
            }
        )

    there = cluster.kubectl("create", "-f", "-", *bob, input=trainjob(vision_ns), check=False)
    assert 'User "bob" cannot create resource "trainjobs"' in there.stderr, there.stderr
    here = cluster.kubectl("create", "-f", "-", *bob, input=trainjob(nlp_ns), check=False)
    assert here.returncode != 0
    assert "aviflow-queue-access" in here.stderr, here.stderr
    assert "queue vision is not open to bob" in here.stderr, here.stderr
    after = kubectl_json(cluster, "get", "trainjob", job_id, "-n", vision_ns, *alice)
    assert "aviflow.dev/cancel" not in (after["metadata"].get("annotations") or {})


# A job's code as a hostile user would write it, run in a trainer pod of the installed chart:
# it looks for the control part (not mounted), forges the files the controller once trusted
# (they land in its own root file system), plants HTML in a metric's name and in a checkpoint
# marker's attempt (not a number: the marker is skipped), makes its rank log a link to its
# pod's service-account token, and fails.
HOSTILE = """
import json, os
import aviflow.tracking
from aviflow.store import CHECKPOINT_MARKER
run = aviflow.tracking.run_dir()
print("control part here:", sorted(p.name for p in run.path.iterdir()), flush=True)
for name, text in {
    "job.yaml": "spec:\\n  queue: nlp\\n  maxRestarts: 3\\n  image: evil:latest\\n",
    "events.jsonl": '{"type": "SUCCEEDED", "time": 1.0}\\n',
    "meta.json": '{"team": "nlp", "user": "bob"}',
}.items():
    try:
        (run.path / name).write_text(text)
    except OSError as exc:
        print("refused", name, type(exc).__name__, flush=True)
tag = "<img src=x onerror=alert(1)>"
ckpt = run.checkpoint_dir(1)
ckpt.mkdir(parents=True)
(ckpt / CHECKPOINT_MARKER).write_text(json.dumps({"step": 1, "attempt": tag, "time": 1.0}))
aviflow.tracking.log({tag: 1.0}, step=1)
os.replace(run.rank_log(0), run.logs_dir / "old.log")
os.symlink("/var/run/secrets/kubernetes.io/serviceaccount/token", run.rank_log(0))
raise RuntimeError("hostile job ends")
"""


def submit_hostile(url: str, alice: User) -> str:
    """Alice's notebook submits the hostile job (1 GPU, no restarts); its id."""
    cell = (
        "%load_ext aviflow\n"  # a kernel of its own
        "get_ipython().run_cell_magic('aviflow_train', "
        f"'--nodes 1 --gpus-per-node 1 --name hostile --out bad', {HOSTILE!r})\n"
        "print('hostile', bad.id)\n"
    )
    out, error = run_in_kernel(f"{url}/user/alice/", alice.token, cell, timeout=300)
    assert error is None, (error, out)
    ids = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert "hostile" in ids, out
    return ids["hostile"]


def hostile_steers_nothing(
    cluster: Cluster,
    ns: str,
    jobs_ns: str,
    url: str,
    alice: User,
    run: RunDir,
    control: tuple[bytes, bytes],
) -> dict[str, Any]:
    """The hostile job fails with its own error after one attempt in her queue; its spec and
    meta are byte for byte what aviflow-api wrote (``control``); aviflow-api refuses its
    linked log (400, naming the link), and its job page shows the planted HTML as text under
    a strict Content-Security-Policy."""
    job_id = run.path.name
    until(
        cluster,
        ns,
        lambda: alice.api(f"jobs/{job_id}")["state"] == "FAILED",
        300,
        "the hostile job fails",
    )
    job = alice.api(f"jobs/{job_id}")
    assert (run.spec_path.read_bytes(), run.meta_path.read_bytes()) == control
    assert (job["spec"]["spec"]["queue"], job["spec"]["spec"]["maxRestarts"]) == ("vision", 0)
    assert (job["failure"]["exception"], job["failure"]["message"]) == (
        "RuntimeError",
        "hostile job ends",
    ), job["failure"]
    assert "eyJ" not in json.dumps(job), "a token reached the job's record"
    types = [e["type"] for e in alice.api(f"jobs/{job_id}/events")["events"]]
    assert types.count("STARTING") == 1 and "SUCCEEDED" not in types, types
    batch = cluster.kubectl("get", "jobs", "-n", jobs_ns, "-o", "name").stdout.split()
    assert [n for n in batch if job_id in n] == [f"job.batch/{job_id}-a1"], batch
    old_log = (run.logs_dir / "old.log").read_text()
    assert "control part here: ['code', 'data']" in old_log, old_log[-2000:]
    api = f"{url}/services/aviflow-api/"
    r = requests.get(f"{api}api/v1/jobs/{job_id}/logs/0", headers=alice.headers, timeout=60)
    assert r.status_code == 400 and "symlink" in r.json()["message"], (r.status_code, r.text)
    page = requests.get(f"{api}jobs/{job_id}", headers=alice.headers, timeout=60)
    assert page.status_code == 200, page.text[:2000]
    assert "<img" not in page.text.lower(), page.text[:4000]
    assert "data-metric='&lt;img src=x onerror=alert(1)&gt;'" in page.text, page.text[:4000]
    assert alice.api(f"jobs/{job_id}/checkpoints")["checkpoints"] == []  # the marker is skipped
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'none'" in csp or "default-src 'none'" in csp, csp
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    return job


def spawn_page(url: str, user: str, password: str) -> list[str]:
    """Log in with the form, as a browser does (the XSRF token from the login page), and
    read the profiles the spawn page offers."""
    s = requests.Session()
    page = s.get(f"{url}/hub/login", timeout=60)
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page.text)
    assert xsrf, page.text[:2000]
    form = {"_xsrf": xsrf.group(1), "username": user, "password": password}
    r = s.post(f"{url}/hub/login", data=form, allow_redirects=False, timeout=60)
    assert (r.status_code, r.headers.get("Location")) == (302, "/hub/spawn"), r.text[:2000]
    r = s.get(f"{url}/hub/spawn", timeout=60)
    assert r.status_code == 200, r.text[:2000]
    return [
        html.unescape(name).strip() for name in re.findall(r"<h3[^>]*>\s*([^<]+?)\s*</h3>", r.text)
    ]


def answers(url: str, verify: str | bool = True) -> bool:
    try:
        return requests.get(url, timeout=5, verify=verify).status_code == 200
    except requests.RequestException as exc:
        print(f"{url}: {exc}", file=sys.stderr)  # the last one is in a failure's report
        return False
