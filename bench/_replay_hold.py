"""The stand-in for a trainer pod in ``bench/replay.py`` (a template: ``{python}``,
``{kubectl}``, ``{kubeconfig}`` and ``{namespace}`` are filled in per configuration:
:func:`stand_in`, also for ``bench/attempt_timeline.py``)."""

from pathlib import Path

import yaml

HOLD = '''#!{python} -S
"""A trainer pod's stand-in (bench/replay.py): holds its GPUs until its job has held them
BENCH_HOLD seconds since admission (its Workload's, whole seconds), over all attempts:
progress is checkpointed each second, so a preempted job resumes. Beats as the runtime does,
and logs a metric row a second (a step a second of hold, toward ``total_steps``: the hold)."""
import datetime, json, os, re, subprocess, time
from pathlib import Path

run = Path(os.environ["AVIFLOW_RUN_DIR"])
node = int(os.environ.get("JOB_COMPLETION_INDEX") or os.environ.get("AVIFLOW_NODE_RANK") or 0)
attempt = int(os.environ["AVIFLOW_ATTEMPT"])
spec = run / "code" / ".aviflow-job.yaml"  # the runtime's copy (job.yaml is not mounted)
hold = int(re.search(r"BENCH_HOLD: '?([0-9]+)", spec.read_text()).group(1))
data = run / "data" if (run / "data").is_dir() else run
beats = data / "heartbeats"
beats.mkdir(parents=True, exist_ok=True)
progress = data / f"bench-progress-{{node}}"


def beat(state):
    body = {{"node": node, "attempt": attempt, "pid": os.getpid(), "time": time.time(),
            "state": state}}
    tmp = beats / f".node-{{node}}.{{os.getpid()}}"
    tmp.write_text(json.dumps(body))
    tmp.replace(beats / f"node-{{node}}.json")


beat("running")
try:
    before = float(progress.read_text())
except (OSError, ValueError):
    before = 0.0
owner = f"{{run.name}}-a{{attempt}}"  # this attempt's Job: its Workload's admission
path = (
    f'{{{{range .items[?(@.metadata.ownerReferences[0].name=="{{owner}}")]}}}}'
    '{{.status.conditions[?(@.type=="Admitted")].lastTransitionTime}}{{end}}'
)
when = subprocess.run(
    ["{kubectl}", "--kubeconfig", "{kubeconfig}", "-n", "{namespace}", "get", "workloads",
     "-o", f"jsonpath={{path}}"],
    capture_output=True, text=True,
).stdout.strip()
try:
    admitted = datetime.datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
except ValueError:
    admitted = time.time()
metrics = data / "metrics.jsonl"
while True:
    done = before + time.time() - admitted
    progress.write_text(f"{{done:.3f}}")
    if node == 0:  # a second of hold is a step, toward the hold declared (aviflow.pace)
        row = {{"step": int(done), "time": time.time(), "attempt": attempt,
               "values": {{"total_steps": hold}}}}
        with metrics.open("a") as f:
            f.write(json.dumps(row) + "\\n")
    if done >= hold:
        break
    time.sleep(min(1.0, hold - done))
    beat("running")
beat("exited")
'''


def stand_in(d: Path, ns: str, runs: Path, python: str, kubectl: str, kubeconfig: str) -> dict:
    """Write ``d/hold.py`` (the template filled in for namespace ``ns``) and the controller's
    ``d/settings.yaml`` that runs it as every pod's ``python``, the run store at ``runs``;
    the settings, as written."""
    hold = d / "hold.py"
    hold.write_text(HOLD.format(python=python, kubectl=kubectl, kubeconfig=kubeconfig,
                                namespace=ns))  # fmt: skip
    hold.chmod(0o755)
    mounts = d / "mounts"
    raw = {
        "namespace": ns, "python": str(hold), "image": "aviflow/trainer:bench",
        "runs": {"localPath": str(runs), "mountPath": str(mounts / "runs")},
        "scratch": [str(mounts / "tmp"), str(mounts / "home")],
    }  # fmt: skip
    (d / "settings.yaml").write_text(yaml.safe_dump(raw))
    return raw


if __name__ == "__main__":  # a template, nothing to run: print it
    print(HOLD)
