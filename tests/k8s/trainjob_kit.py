"""What the TrainJob tests on the test control plane share: the tiny regression job and the
process of one of its ranks (the test cluster's pods are processes of this machine)."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from aviflow.spec import TrainJob

TINY = files("aviflow.examples").joinpath("tiny_regression.py").read_text()


def tiny(name: str, queue: str = "default", nodes: int = 2, gpus: int = 2, **spec: Any) -> TrainJob:
    env = {"TINY_STEPS": "30", "TINY_CKPT_EVERY": "10", **spec.pop("env", {})}
    return TrainJob.from_dict(
        {
            "metadata": {"name": name},
            "spec": {
                "queue": queue,
                "nodes": nodes,
                "gpusPerNode": gpus,
                "script": TINY,
                "env": env,
                **spec,
            },
        }
    )


def rank_process(run_dir: str, rank: int) -> Any:
    """The process of ``rank`` of the job whose pods mount ``run_dir`` (the test cluster's
    pods are processes of this machine)."""
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = proc.info["cmdline"] or []
            # (accelerate's launcher carries the wrapper in its argv and has no RANK: for rank
            # 0 it may be the one found, which tests/k8s/test_faults.py's exit code counts on)
            if "aviflow.runtime.rank" not in cmd:
                continue
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        # (accelerate sets no RANK for a single process: rank 0, as aviflow's process_rank)
        if env.get("AVIFLOW_RUN_DIR") == run_dir and (env.get("RANK") or "0") == str(rank):
            return proc
    return None
