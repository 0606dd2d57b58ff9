"""``aviflow``: submit and follow jobs from a shell.

Exit codes: 0 success (or the job SUCCEEDED), 1 the job FAILED, 2 bad usage or spec,
3 the job was CANCELLED, 4 no such job, 5 backend error, 124 ``--wait``/``-f`` timed out.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TextIO

from aviflow import api
from aviflow._flags import add_spec_flags, apply, given
from aviflow.backends import Backend, get_backend
from aviflow.backends.local import LocalBackend
from aviflow.errors import AviflowError, BackendError, JobNotFound, RequestError, SpecError
from aviflow.estimate import describe
from aviflow.job import Job
from aviflow.records import JobState, JobStatus, JobSummary
from aviflow.spec import TrainJob
from aviflow.views.waiting import start_short, start_words, waiting_lines

# The spec flags of `aviflow submit` (aviflow/spec_flags.json): they override the file's.
SUBMIT_FLAGS = ("--secret", "--runtime")
EXIT_FOR_STATE = {JobState.SUCCEEDED: 0, JobState.FAILED: 1, JobState.CANCELLED: 3}
EXIT_FOR_ERROR: dict[type[Exception], int] = {
    SpecError: 2,
    RequestError: 2,
    JobNotFound: 4,
    BackendError: 5,
    TimeoutError: 124,
}


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def _backend(ns: argparse.Namespace) -> Backend:
    if ns.root is not None:
        if ns.backend not in (None, "local"):
            raise BackendError("--root applies to the local backend only")
        return LocalBackend(root=ns.root)
    return get_backend(ns.backend)


def _table(rows: list[list[str]], out: TextIO = sys.stdout) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip(), file=out)


def _follow(job: Job, timeout: float | None, show: Callable[[Job, JobStatus], None]) -> JobState:
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        record = job.status_record()
        show(job, record)
        if record.state.is_finished():
            return record.state
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"job {job.id} is still {record.state.value} after {timeout}s")
        time.sleep(1.0)


def _progress_printer() -> Callable[[Job, JobStatus], None]:
    """Prints a line whenever the state, the queue position or the latest metrics change;
    reads only the metrics logged since the last call."""
    last: dict[str, str] = {}
    cursor = [0]
    latest: list[dict[str, object]] = [{}]

    def show(job: Job, record: JobStatus) -> None:
        line = record.state.value
        if record.state is JobState.QUEUED and record.message:
            line += f": {record.message}"  # what it waits for: slots or its queue's quota
            if record.expected_start is not None:
                line += f"; {start_words(record.expected_start, time.time())}"
        elif record.queue_position:
            line += f" (queue position {record.queue_position})"
        if record.attempt > 1:
            line += f" attempt {record.attempt}"
        rows, cursor[0] = job.metric_batch(cursor[0])
        if rows:
            latest[0] = {"step": rows[-1].step, **rows[-1].values}
        if latest[0]:
            step, values = latest[0]["step"], {k: v for k, v in latest[0].items() if k != "step"}
            shown = ", ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items()
            )
            line += f"  step {step}: {shown}"
        if line != last.get("line"):
            print(f"[{_when(time.time())}] {job.id} {line}", flush=True)
            last["line"] = line

    return show


def cmd_submit(ns: argparse.Namespace) -> int:
    spec, spec_dir = api.load_spec(ns.file)
    values = given(ns, SUBMIT_FLAGS)
    if values:
        spec = TrainJob.from_dict(apply(spec.to_dict(), values))
    if ns.dry_run:
        rendered = _backend(ns).render(spec)
        if rendered is None:
            print("aviflow: this backend cannot show what it would create", file=sys.stderr)
            return 2
        import yaml

        found = _backend(ns).forecast(spec)
        if found is not None:  # a YAML comment: the output stays the objects it would create
            print(f"# {describe(found, time.time())}")
        print(yaml.safe_dump_all(rendered, sort_keys=False), end="")
        return 0
    job = api.submit(spec, backend=_backend(ns), base_dir=spec_dir)
    print(job.id, flush=True)
    if not ns.wait:
        return 0
    state = _follow(job, ns.timeout, _progress_printer())
    _print_outcome(job, state)
    return EXIT_FOR_STATE[state]


def _print_outcome(job: Job, state: JobState) -> None:
    print(f"{job.id} {state.value}")
    failure = job.failure
    if state is JobState.FAILED and failure is not None:
        print(f"first failure: {failure.where()}: {failure.what()}", file=sys.stderr)
        print(failure.detail(), file=sys.stderr)
    latest = job.latest_checkpoint()
    if latest is not None:
        try:
            where = f" at {job.checkpoint_path(latest)}"
        except AviflowError:
            where = ""
        print(f"latest checkpoint: step {latest.step}{where}")
    print(f"GPU-seconds allocated: {job.usage().gpu_seconds:.1f}")


def ls_rows(summaries: Sequence[JobSummary], now: float) -> list[list[str]]:
    """``aviflow ls``'s table, oldest first; START: a queued job's expected start."""
    rows = [["ID", "NAME", "STATE", "NODES", "GPUS", "SUBMITTED", "START"]]
    for s in reversed(summaries):
        start = start_short(s.expected_start, now) if s.state is JobState.QUEUED else ""
        rows.append(
            [s.id, s.name, s.state.value, str(s.nodes), str(s.gpus), _when(s.submitted), start]
        )
    return rows


def cmd_ls(ns: argparse.Namespace) -> int:
    _table(ls_rows(_backend(ns).summaries(), time.time()))
    return 0


def cmd_images(ns: argparse.Namespace) -> int:
    from aviflow.images import TRACKED

    rows = [["NAME", "IMAGE", "LOCK", *(n.upper() for n in TRACKED)]]
    for i, image in enumerate(_backend(ns).images()):
        name = f"{image.name} (default)" if i == 0 else image.name
        pins = [image.packages.get(n, "-") for n in TRACKED]
        rows.append([name, image.image or "-", image.lock_hash or "-", *pins])
    _table(rows)
    return 0


def status_doc(
    job_id: str, name: str, record: JobStatus, gpu_seconds: float, now: float
) -> dict[str, object]:
    """``aviflow status``'s answer: the status record, and for a queued job ``waiting``, the
    lines every view shows of its wait (:func:`aviflow.views.waiting.waiting_lines`)."""
    out: dict[str, object] = {"id": job_id, "name": name, **record.to_dict()}
    if record.state is JobState.QUEUED:
        lines = waiting_lines(record.expected_start, record.wait, record.message, now)
        if lines:
            out["waiting"] = lines
    out["gpuSeconds"] = round(gpu_seconds, 3)
    return out


def cmd_status(ns: argparse.Namespace) -> int:
    job = api.get(ns.id, _backend(ns))
    record = job.status_record()
    doc = status_doc(job.id, job.name, record, job.usage().gpu_seconds, time.time())
    print(json.dumps(doc, indent=2))
    return EXIT_FOR_STATE.get(record.state, 0)


def cmd_logs(ns: argparse.Namespace) -> int:
    job = api.get(ns.id, _backend(ns))
    if not ns.follow:
        sys.stdout.write(job.logs(rank=ns.rank, tail=ns.tail))
        return 0
    ranks = [ns.rank] if ns.rank is not None else None
    offsets: dict[int, int] = {}
    pending: dict[int, str] = {}
    while True:
        finished = job.status.is_finished()
        for rank in ranks or job.backend.ranks(job.id):
            if rank not in offsets and ns.tail is not None:
                chunk = job.backend.log(job.id, rank, tail=ns.tail)
            else:
                chunk = job.backend.log(job.id, rank, offset=offsets.get(rank, 0))
            offsets[rank] = chunk.next
            *lines, rest = (pending.pop(rank, "") + chunk.text).split("\n")
            if finished and rest:
                lines.append(rest)
            elif rest:
                pending[rank] = rest  # a line still being written
            for line in lines:
                sys.stdout.write(line + "\n" if ranks else f"[rank {rank}] {line}\n")
        sys.stdout.flush()
        if finished:
            return 0
        time.sleep(0.5)


def cmd_cancel(ns: argparse.Namespace) -> int:
    job = api.get(ns.id, _backend(ns))
    if job.cancel():
        print(f"{job.id} CANCELLED")
    else:
        print(f"{job.id} had already finished ({job.status.value})")
    return 0


def cmd_metrics(ns: argparse.Namespace) -> int:
    job = api.get(ns.id, _backend(ns))
    rows = job.metric_rows()
    keys = ["step", "time", "attempt"]
    for row in rows:
        keys += [k for k in row if k not in keys]
    if ns.csv:
        writer = csv.DictWriter(sys.stdout, fieldnames=keys, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    elif rows:
        _table([keys] + [[str(r.get(k, "")) for k in keys] for r in rows])
    else:
        print(f"{job.id} has logged no metrics yet")
    return 0


def cmd_usage(ns: argparse.Namespace) -> int:
    rows = [["ID", "NAME", "STATE", "GPUS", "ATTEMPTS", "GPU-SECONDS", "GPU-HOURS"]]
    total = 0.0
    for s in reversed(_backend(ns).summaries()):
        total += s.gpu_seconds
        rows.append(
            [
                s.id,
                s.name,
                s.state.value,
                str(s.gpus),
                str(s.attempt),
                f"{s.gpu_seconds:.1f}",
                f"{s.gpu_seconds / 3600:.4f}",
            ]
        )
    rows.append(["TOTAL", "", "", "", "", f"{total:.1f}", f"{total / 3600:.4f}"])
    _table(rows)
    return 0


def cmd_store_migrate(ns: argparse.Namespace) -> int:
    from aviflow.store import RunStore

    store = RunStore(ns.root)
    moved = store.migrate_legacy()
    for job_id in moved:
        print(f"moved {job_id}")
    print(f"{len(moved)} job(s) of an earlier layout moved into {store.root}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aviflow", description="Submit and follow Aviflow training jobs."
    )
    parser.add_argument(
        "--root", help="run store of the local backend (default $AVIFLOW_ROOT or ~/.aviflow/runs)"
    )
    parser.add_argument("--backend", help="backend name (default $AVIFLOW_BACKEND or 'local')")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("submit", help="submit a TrainJob YAML")
    p.add_argument("file")
    p.add_argument("--wait", action="store_true", help="follow the job until it finishes")
    p.add_argument("--timeout", type=float, help="with --wait: give up after this many seconds")
    add_spec_flags(p, SUBMIT_FLAGS, with_key=True)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print what would be created (Kubernetes manifests, or each node's command) and submit nothing",
    )
    p.set_defaults(func=cmd_submit)

    sub.add_parser("ls", help="list jobs").set_defaults(func=cmd_ls)
    sub.add_parser(
        "images", help="the trainer images jobs may run in (spec.image, --image)"
    ).set_defaults(func=cmd_images)

    p = sub.add_parser("status", help="show a job's status")
    p.add_argument("id")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("logs", help="print a job's logs")
    p.add_argument("id")
    p.add_argument("--rank", type=int)
    p.add_argument("--tail", type=int)
    p.add_argument("-f", "--follow", action="store_true")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("cancel", help="cancel a job and stop all its processes")
    p.add_argument("id")
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("metrics", help="print a job's metrics")
    p.add_argument("id")
    p.add_argument("--csv", action="store_true")
    p.set_defaults(func=cmd_metrics)

    sub.add_parser("usage", help="GPU-seconds allocated per job").set_defaults(func=cmd_usage)

    p = sub.add_parser("store", help="maintain a run store (--root, default $AVIFLOW_ROOT)")
    store = p.add_subparsers(dest="store_command", required=True, metavar="STORE_COMMAND")
    store.add_parser(
        "migrate",
        help="move the finished jobs of the flat layout of earlier versions (<root>/<job-id>/) "
        "under their users' directories, into the index (reads never move them)",
    ).set_defaults(func=cmd_store_migrate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # --root/--backend may also follow the subcommand
    ns, rest = parser.parse_known_args(argv)
    if rest:
        extra = argparse.ArgumentParser(add_help=False)
        extra.add_argument("--root")
        extra.add_argument("--backend")
        more, unknown = extra.parse_known_args(rest)
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        ns.root = more.root or ns.root
        ns.backend = more.backend or ns.backend
    try:
        return int(ns.func(ns))
    except tuple(EXIT_FOR_ERROR) as exc:
        print(f"aviflow: {exc}", file=sys.stderr)
        return next(code for kind, code in EXIT_FOR_ERROR.items() if isinstance(exc, kind))
    except KeyboardInterrupt:
        print("aviflow: interrupted; the job keeps running (see `aviflow status`)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
