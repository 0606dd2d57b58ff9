"""``--dry-run``: what would be submitted, and what it would cost. Nothing is written.

Shows the resolved spec, the GPU-hours requested (nodes x gpusPerNode x timeLimit), the
queue's quota when the backend can tell (``Backend.quota(queue)``), when the job would start
("fits now", "expected to start in about ...", "never at this quota: ..."; from
``Backend.forecast(job)``), and what the backend
would create (``Backend.render(job)``: manifests on a cluster, each node's argv locally).
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from typing import Any

import yaml

from aviflow.backends import Backend
from aviflow.estimate import describe
from aviflow.records import QueueQuota
from aviflow.spec import TrainJob
from aviflow_magics._build import gpu_hours_requested


@dataclass(frozen=True)
class DryRun:
    """The dry-run report; its display is plain text (also as HTML ``<pre>``)."""

    job: TrainJob
    backend_name: str
    files: dict[str, int]
    gpu_hours: float | None
    quota: QueueQuota | None = None
    manifests: str | None = None
    notes: list[str] = field(default_factory=list)
    origin: dict[str, Any] = field(default_factory=dict)
    start: str | None = None  # when it would start (Backend.forecast), said for a person

    def text(self) -> str:
        s = self.job.spec
        lines = [
            f"Dry run of {self.job.metadata.name!r} on backend {self.backend_name!r}: nothing was submitted."
        ]
        if self.gpu_hours is None:
            lines.append(
                f"GPU-hours requested: {s.nodes} nodes x {s.gpus_per_node} GPUs x no timeLimit "
                f"= unbounded ({s.total_gpus} GPUs while it runs)"
            )
        else:
            lines.append(
                f"GPU-hours requested: {s.nodes} nodes x {s.gpus_per_node} GPUs x {s.time_limit} "
                f"= {self.gpu_hours:g} GPU-hours"
            )
        if self.quota is None:
            lines.append(f"Quota of queue {s.queue!r}: not known to this backend")
        else:
            q = self.quota
            limit = "unlimited" if q.gpu_quota is None else f"{q.gpu_quota} GPUs"
            lines.append(
                f"Quota of queue {q.queue!r}: {limit}, {q.gpus_in_use} in use, "
                f"{q.pending_count} job(s) waiting"
            )
        lines.append(f"Start: {self.start or 'not known to this backend'}")
        if s.resume_from is not None:
            r = s.resume_from
            lines.append(f"Starts from checkpoint step {r.step} of job {r.job}")
        if self.origin:
            o = self.origin
            lines.append(
                f"Origin: notebook {o.get('notebook')}, cell {o.get('cell_id')} "
                f"[{o.get('execution_count')}], {o.get('cell_hash')}"
            )
        lines.append(
            "Code: " + ", ".join(f"{n} ({b} bytes)" for n, b in sorted(self.files.items()))
        )
        lines.extend(self.notes)
        lines += ["", "--- spec ---", spec_yaml(self.job).rstrip()]
        if self.manifests:
            lines += ["", "--- manifests ---", self.manifests.rstrip()]
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        return self.text()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())

    def _repr_html_(self) -> str:
        return f"<pre class='aviflow-dry-run'>{html.escape(self.text())}</pre>"


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (the script) as YAML literal blocks, as a person writes them."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value.rstrip("\n") or value.endswith("\n") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str)


def spec_yaml(job: TrainJob) -> str:
    """The spec as YAML, with the script as a literal block (loads back to the same spec)."""
    return yaml.dump(job.to_dict(), Dumper=_BlockDumper, sort_keys=False)


def _render_manifests(backend: Backend, job: TrainJob) -> str | None:
    rendered = backend.render(job)
    if rendered is None:
        return None
    return yaml.safe_dump_all(rendered, sort_keys=False)


def dry_run(
    job: TrainJob,
    backend: Backend,
    files: dict[str, bytes],
    notes: list[str] | None = None,
    origin: dict[str, Any] | None = None,
) -> DryRun:
    name = backend.name
    return DryRun(
        job=job,
        backend_name=name,
        files={n: len(b) for n, b in files.items()},
        gpu_hours=gpu_hours_requested(job),
        quota=backend.quota(job.spec.queue),
        manifests=_render_manifests(backend, job),
        notes=list(notes or []),
        origin=dict(origin or {}),
        start=forecast_line(backend, job),
    )


def forecast_line(backend: Backend, job: TrainJob) -> str | None:
    """When ``job`` would start if submitted now, in words (None: the backend cannot tell)."""
    found = backend.forecast(job)
    return None if found is None else describe(found, time.time())
