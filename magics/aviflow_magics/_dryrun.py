"""``--dry-run``: what would be submitted, and what it would cost. Nothing is written.

Shows the resolved spec, the GPU-hours requested (nodes x gpusPerNode x timeLimit), the
queue's quota when the backend can tell (an optional ``quota(queue)`` method), and, for a
cluster backend, the objects it would create (an optional ``render(job)`` method).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import yaml

from aviflow.backends import Backend
from aviflow.spec import TrainJob
from aviflow_magics._build import gpu_hours_requested


@dataclass(frozen=True)
class DryRun:
    """The dry-run report; its display is plain text (also as HTML ``<pre>``)."""

    job: TrainJob
    backend_name: str
    files: dict[str, int]
    gpu_hours: float | None
    quota: dict[str, Any] | None = None
    manifests: str | None = None
    resume_from: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    origin: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        s = self.job.spec
        lines = [f"Dry run of {self.job.metadata.name!r} on backend {self.backend_name!r}: nothing was submitted."]
        if self.gpu_hours is None:
            lines.append(f"GPU-hours requested: {s.nodes} nodes x {s.gpus_per_node} GPUs x no timeLimit "
                         f"= unbounded ({s.total_gpus} GPUs while it runs)")
        else:
            lines.append(f"GPU-hours requested: {s.nodes} nodes x {s.gpus_per_node} GPUs x {s.time_limit} "
                         f"= {self.gpu_hours:g} GPU-hours")
        if self.quota is None:
            lines.append(f"Quota of queue {s.queue!r}: not known to this backend")
        else:
            shown = ", ".join(f"{k}: {v}" for k, v in self.quota.items())
            lines.append(f"Quota of queue {s.queue!r}: {shown}")
        if self.resume_from:
            r = self.resume_from
            lines.append(f"Starts from checkpoint step {r['step']} of job {r['job']} ({r['path']})")
        if self.origin:
            o = self.origin
            lines.append(f"Origin: notebook {o.get('notebook')}, cell {o.get('cell_id')} "
                         f"[{o.get('execution_count')}], {o.get('cell_hash')}")
        lines.append("Code: " + ", ".join(f"{n} ({b} bytes)" for n, b in sorted(self.files.items())))
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
    render = getattr(backend, "render", None)
    if not callable(render):
        return None
    rendered = render(job)
    if isinstance(rendered, str):
        return rendered
    objects = rendered if isinstance(rendered, list | tuple) else [rendered]
    return yaml.safe_dump_all(list(objects), sort_keys=False)


def _quota(backend: Backend, queue: str) -> dict[str, Any] | None:
    quota = getattr(backend, "quota", None)
    if not callable(quota):
        return None
    found = quota(queue)
    return dict(found) if found else None


def dry_run(
    job: TrainJob,
    backend: Backend,
    files: dict[str, bytes],
    resume_from: dict[str, Any] | None = None,
    notes: list[str] | None = None,
    origin: dict[str, Any] | None = None,
) -> DryRun:
    name = getattr(backend, "name", type(backend).__name__)
    return DryRun(
        job=job, backend_name=name, files={n: len(b) for n, b in files.items()},
        gpu_hours=gpu_hours_requested(job), quota=_quota(backend, job.spec.queue),
        manifests=_render_manifests(backend, job), resume_from=resume_from,
        notes=list(notes or []), origin=dict(origin or {}),
    )
