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

from aviflow import api
from aviflow.backends import Backend, get_backend
from aviflow.backends.local import LocalBackend
from aviflow.errors import BackendError, JobNotFound, SpecError
from aviflow.job import Job
from aviflow.status import JobState

EXIT_FOR_STATE = {JobState.SUCCEEDED: 0, JobState.FAILED: 1, JobState.CANCELLED: 3}
EXIT_FOR_ERROR: dict[type[Exception], int] = {
    SpecError: 2,
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


def _table(rows: list[list[str]], out=sys.stdout) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip(), file=out)


def _follow(job: Job, timeout: float | None, show: Callable[[Job, dict], None]) -> JobState:
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        record = job.status_record()
        show(job, record)
        state = JobState(record["state"])
        if state.is_finished():
            return state
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"job {job.id} is still {state.value} after {timeout}s")
        time.sleep(1.0)


def _progress_printer() -> Callable[[Job, dict], None]:
    last: dict[str, object] = {}

    def show(job: Job, record: dict) -> None:
        line = f"{record['state']}"
        if record["state"] == JobState.QUEUED and record.get("message"):
            line += f": {record['message']}"  # what it waits for: slots or its queue's quota
        elif record.get("queuePosition"):
            line += f" (queue position {record['queuePosition']})"
        if record.get("attempt", 0) > 1:
            line += f" attempt {record['attempt']}"
        rows = job.backend.metrics(job.id)
        if rows:
            values = ", ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                for k, v in rows[-1]["values"].items()
            )
            line += f"  step {rows[-1]['step']}: {values}"
        if line != last.get("line"):
            print(f"[{_when(time.time())}] {job.id} {line}", flush=True)
            last["line"] = line

    return show


def cmd_submit(ns: argparse.Namespace) -> int:
    job = api.submit(ns.file, backend=_backend(ns))
    print(job.id, flush=True)
    if not ns.wait:
        return 0
    state = _follow(job, ns.timeout, _progress_printer())
    _print_outcome(job, state)
    return EXIT_FOR_STATE[state]


def _print_outcome(job: Job, state: JobState) -> None:
    print(f"{job.id} {state.value}")
    if state == JobState.FAILED and job.failure:
        f = job.failure
        print(f"first failure: rank {f.get('rank')} (node {f.get('node')})", file=sys.stderr)
        print(f.get("traceback") or f.get("log_tail", ""), file=sys.stderr)
    latest = job.latest_checkpoint()
    if latest:
        print(f"latest checkpoint: step {latest['step']} at {latest['path']}")
    print(f"GPU-seconds allocated: {job.usage().gpu_seconds:.1f}")


def cmd_ls(ns: argparse.Namespace) -> int:
    jobs = api.jobs(_backend(ns))
    rows = [["ID", "NAME", "STATE", "NODES", "GPUS", "SUBMITTED"]]
    for job in jobs:
        spec, record = job.spec, job.status_record()
        rows.append(
            [
                job.id,
                spec.metadata.name,
                record["state"],
                str(spec.spec.nodes),
                str(spec.spec.total_gpus),
                _when(job.backend.meta(job.id).get("submitted")),
            ]
        )
    _table(rows)
    return 0


def cmd_status(ns: argparse.Namespace) -> int:
    job = api.get(ns.id, _backend(ns))
    record = job.status_record()
    print(
        json.dumps(
            {
                "id": job.id,
                "name": job.name,
                **record,
                "gpu_seconds": round(job.usage().gpu_seconds, 3),
            },
            indent=2,
        )
    )
    return EXIT_FOR_STATE.get(JobState(record["state"]), 0)


def cmd_logs(ns: argparse.Namespace) -> int:
    job = api.get(ns.id, _backend(ns))
    if not ns.follow:
        sys.stdout.write(job.logs(rank=ns.rank, tail=ns.tail))
        return 0
    ranks = [ns.rank] if ns.rank is not None else None
    offsets: dict[int, int] = {}
    while True:
        finished = job.status.is_finished()
        for rank in ranks or job.backend.ranks(job.id):
            text = job.backend.log_text(job.id, rank)
            new = text[offsets.get(rank, 0) :]
            offsets[rank] = len(text)
            for line in new.splitlines():
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
    for job in api.jobs(_backend(ns)):
        u = job.usage()
        total += u.gpu_seconds
        rows.append(
            [
                job.id,
                job.name,
                job.status.value,
                str(u.gpus),
                str(u.attempts),
                f"{u.gpu_seconds:.1f}",
                f"{u.gpu_hours:.4f}",
            ]
        )
    rows.append(["TOTAL", "", "", "", "", f"{total:.1f}", f"{total / 3600:.4f}"])
    _table(rows)
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
    p.set_defaults(func=cmd_submit)

    sub.add_parser("ls", help="list jobs").set_defaults(func=cmd_ls)

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
        return ns.func(ns)
    except tuple(EXIT_FOR_ERROR) as exc:
        print(f"aviflow: {exc}", file=sys.stderr)
        return next(code for kind, code in EXIT_FOR_ERROR.items() if isinstance(exc, kind))
    except KeyboardInterrupt:
        print("aviflow: interrupted; the job keeps running (see `aviflow status`)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
