"""The run store: one directory per job, written atomically, readable while the job runs.

:class:`RunDir` owns every path inside a job's directory and :class:`RunStore` every path
above it; no other module spells a file name of the store. The layout::

    <root>/<user>/<job-id>/          one user's (or one job's) directory can be mounted alone
        job.yaml                     control: the validated TrainJob spec
        meta.json                    control: JobMeta: id, name, user, team, submit time, code
                                     hash, origin (the client's claim)
        events.jsonl                 control: append-only lifecycle Events (QUEUED, STARTING, ...)
        status.json                  control: the latest JobStatus, rewritten atomically
        hangs/attempt-<a>.json       control: the hang the driver declared
        submission.json              control: the token its TrainJob carries (aviflow-api's)
        k8s.json, supervisor.{lock,json,log}, processes.json, cancel-requested
                                     control: the controller's binding; the local supervisor's
        code/                        the code snapshot (read-only in pods): MANIFEST.json
                                     (sha256 per file, content hash), the entry point, vars.pkl,
                                     accelerate_config.yaml, .aviflow-job.yaml (the runtime's spec)
        data/                        what the job writes (its pods' only writable mount):
            metrics.jsonl            one MetricRow per logged step
            logs/node-<n>.log        each node's launcher output (rotated as a rank's log is,
                                     at one rank's share of the cap; .1 as for a rank)
            logs/rank-<r>.log        each process's output (rotated under the job's log cap:
                                     logs/rank-<r>.log.1 keeps what the last rotation cut)
            failures/attempt-<a>-rank-<r>.json   a FailureInfo, written by a rank that raised
            heartbeats/node-<n>.json           refreshed by each node's runtime
            heartbeats/attempt-<a>-rank-<r>.json   refreshed by each rank's watchdog
            stacks/attempt-<a>-rank-<r>.txt    a rank's Python stacks (hang reports);
                                     attempt-<a>.requested asks for them
            checkpoints/step-<N>/    complete ones carry aviflow-checkpoint.json
            work/                    the ranks' working directory
    <root>/.ids/<job-id>             a link to ../<user>/<job-id>: reserves the id store-wide
    <root>/.ids.jsonl                one line per created job, oldest first (listings read its end)
    <root>/.pending/<job-id>         a job whose driver has yet to take it up (a TrainJob to create)

``<user>`` is the owner's name as a DNS-1123 label (:func:`aviflow.names.slugify`). Writers
replace whole files with ``os.replace`` or append whole lines with one ``write``, so readers
never see a torn file; readers skip a line they cannot parse rather than fail. Job ids are
DNS-1123 labels, checked before any path is built from them, so no id points outside the root.

The control part is written only by the platform and is never mounted into a job's pod;
the platform builds every decision from it and from the TrainJob object (``SECURITY.md``).
**Everything in a job's directory is still read as hostile input**: the job's code may have
written any of ``data/`` (and, in a job made before the split, the whole directory). Every read opens its file beneath the job's directory without following a symlink at any
component and refuses anything but a regular file, reads a bounded number of bytes, and
parses what it read with its types enforced (:mod:`._files`, :mod:`._data`); writers follow no
symlink either. A refused file is an :class:`~aviflow.errors.UnsafeJobFile`.

Reads are incremental where files grow: :meth:`RunDir.events` and :meth:`RunDir.metrics`
take a byte-offset cursor and return one page, a :class:`~aviflow.paging.Batch`: at most
the rows and the bytes (of records as JSON) asked for, read from at most 8 MiB of the file,
the cursor to continue from and whether more follows it (``more``; :func:`read_records`);
:meth:`RunDir.log` reads a tail (from the end) or from an offset, counted in the log as
one stream across rotations (:mod:`._logs`).

The modules: :mod:`._files` (opening, reading and writing without following symlinks),
:mod:`._data` (what a job writes: checkpoint markers, metric rows, failure records),
:mod:`._logs` (rank logs: read by offset or tail, rotated under a cap), :mod:`._rundir`
(one job's directory), :mod:`._runstore` (the index, locating, creating and staging),
:mod:`._events` (jobs' event logs read once, then only as they grow), :mod:`._migrate`
(moving a store of the earlier flat layout in: an explicit step, never a read's).
"""

from aviflow.store._data import (
    CHECKPOINT_MARKER,
    CHECKPOINT_PREFIX,
    checkpoint_name,
    checkpoint_ref,
    metric_row,
    scan_checkpoints,
)
from aviflow.store._events import EventsCache
from aviflow.store._files import (
    MAX_LINES_READ,
    MAX_RECORD_BYTES,
    append_line,
    append_lines,
    atomic_write,
    disk_full,
    low_on_space,
    out_of_space,
    read_json,
    read_lines,
    read_records,
)
from aviflow.store._logs import (
    DEFAULT_JOB_LOG_CAP,
    MAX_LOG_READ,
    MAX_TAIL_LINES,
    MIN_RANK_LOG_CAP,
    RANK_LOG_CAP_HELP,
    RANK_LOG_CAP_SCHEMA,
    RankLogCap,
    Rotation,
    job_log_cap,
    rank_log_share,
    read_log,
)
from aviflow.store._rundir import (
    CODE_DIR,
    DATA_DIR,
    MANIFEST,
    RUNTIME_SPEC,
    VARS_FILE,
    RunDir,
)
from aviflow.store._runstore import (
    INDEX_DIR,
    INDEX_LOG,
    PENDING_DIR,
    ROOT_ENV,
    RunStore,
    default_root,
    new_job_id,
    short_id,
)

__all__ = [
    "CHECKPOINT_MARKER",
    "CHECKPOINT_PREFIX",
    "CODE_DIR",
    "DATA_DIR",
    "DEFAULT_JOB_LOG_CAP",
    "INDEX_DIR",
    "INDEX_LOG",
    "MANIFEST",
    "MAX_LINES_READ",
    "MAX_LOG_READ",
    "MAX_RECORD_BYTES",
    "MAX_TAIL_LINES",
    "MIN_RANK_LOG_CAP",
    "PENDING_DIR",
    "RANK_LOG_CAP_HELP",
    "RANK_LOG_CAP_SCHEMA",
    "ROOT_ENV",
    "RUNTIME_SPEC",
    "VARS_FILE",
    "EventsCache",
    "RankLogCap",
    "Rotation",
    "RunDir",
    "RunStore",
    "append_line",
    "append_lines",
    "atomic_write",
    "checkpoint_name",
    "checkpoint_ref",
    "default_root",
    "disk_full",
    "job_log_cap",
    "low_on_space",
    "metric_row",
    "new_job_id",
    "out_of_space",
    "rank_log_share",
    "read_json",
    "read_lines",
    "read_log",
    "read_records",
    "scan_checkpoints",
    "short_id",
]
