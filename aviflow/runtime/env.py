"""``RuntimeEnv``: the one owner of the in-job runtime's environment variables.

The local supervisor (and, on the cluster, the Indexed Job's pod template) builds a
``RuntimeEnv`` and passes :meth:`RuntimeEnv.to_env`; the runtime, the rank wrapper and the
training-side API read it back with :meth:`RuntimeEnv.from_env`. No other module spells
these names.

=========================  ===============================================================
``AVIFLOW_RUN_DIR``        the job's run-store directory, as this node mounts it
``AVIFLOW_NODE_RANK``      this node's index (on Kubernetes ``JOB_COMPLETION_INDEX`` instead)
``AVIFLOW_NUM_NODES``      nodes in the job
``AVIFLOW_MAIN_ADDR``      rank 0's address (``<job>-0.<service>`` on Kubernetes; one node: ``127.0.0.1``)
``AVIFLOW_MAIN_PORT``      rank 0's rendezvous port
``AVIFLOW_ATTEMPT``        1, 2, ...: which admission of the job this is
``AVIFLOW_KEEP_LAST``      checkpoints to keep (``spec.checkpoints.keepLast``)
``AVIFLOW_LOG_TO_STORE``   ``0``: leave the node's output on stdout (a pod's log) instead
``AVIFLOW_DEVICE``         ``gpu`` / ``cpu``: override the GPU detection (a user setting)
``AVIFLOW_JOB_TAG``        the local backend's process tag (every process of a local job)
``AVIFLOW_HANG_TIMEOUT``   seconds without progress after which a rank's watchdog dumps its
                           stacks by itself (``spec.hangTimeout``)
``AVIFLOW_RESUME_DIR``     where ``spec.resumeFrom``'s checkpoint is mounted (read-only), when
                           the run store is not mounted whole (a pod on the cluster)
``AVIFLOW_RANK_LOG_BYTES`` each rank's share of the job's log cap: its log and ``.log.1``
                           together (the admin's setting; unset: no cap)
=========================  ===============================================================

``RANK`` (set per process by ``accelerate launch``) is read here too: :func:`process_rank`.

>>> env = RuntimeEnv(run_dir=Path("/runs/u/j"), node_rank=1, num_nodes=2, attempt=2)
>>> RuntimeEnv.from_env(env.to_env()) == env
True
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

RUN_DIR = "AVIFLOW_RUN_DIR"
NODE_RANK = "AVIFLOW_NODE_RANK"
COMPLETION_INDEX = "JOB_COMPLETION_INDEX"  # Kubernetes Indexed Jobs set it
NUM_NODES = "AVIFLOW_NUM_NODES"
MAIN_ADDR = "AVIFLOW_MAIN_ADDR"
MAIN_PORT = "AVIFLOW_MAIN_PORT"
ATTEMPT = "AVIFLOW_ATTEMPT"
KEEP_LAST = "AVIFLOW_KEEP_LAST"
LOG_TO_STORE = "AVIFLOW_LOG_TO_STORE"
DEVICE = "AVIFLOW_DEVICE"
JOB_TAG = "AVIFLOW_JOB_TAG"
RESUME_DIR = "AVIFLOW_RESUME_DIR"
HANG_TIMEOUT = "AVIFLOW_HANG_TIMEOUT"
RANK_LOG_BYTES = "AVIFLOW_RANK_LOG_BYTES"
PROCESS_RANK = "RANK"  # accelerate launch / torchrun, per process
DEFAULT_MAIN_PORT = 29500
DEFAULT_KEEP_LAST = 3
# Where the training-side API writes outside a job (a script tried in a notebook first).
OUTSIDE_JOB_DIR = Path(".aviflow") / "run"
NAMES = (RUN_DIR, NODE_RANK, NUM_NODES, MAIN_ADDR, MAIN_PORT, ATTEMPT, KEEP_LAST, LOG_TO_STORE,
         DEVICE, JOB_TAG, RESUME_DIR, HANG_TIMEOUT, RANK_LOG_BYTES)  # fmt: skip


class RuntimeEnvError(ValueError):
    """The runtime's environment is missing a variable or has a bad value."""


@dataclass(frozen=True)
class RuntimeEnv:
    """Where one node of a job sits and what it needs to know (see the module table)."""

    run_dir: Path
    node_rank: int = 0
    num_nodes: int = 1
    main_addr: str = "127.0.0.1"
    main_port: int = DEFAULT_MAIN_PORT
    attempt: int = 1
    keep_last: int = DEFAULT_KEEP_LAST
    log_to_store: bool = True
    device: str | None = None
    job_tag: str | None = None
    resume_dir: Path | None = None
    hang_timeout: float | None = None
    rank_log_bytes: int | None = None

    def to_env(self, *, node_rank: bool = True) -> dict[str, str]:
        """The variables, as strings. ``node_rank=False`` leaves the node's index out (a pod
        template shared by every index of an Indexed Job; ``JOB_COMPLETION_INDEX`` gives it)."""
        env = {
            RUN_DIR: str(self.run_dir),
            NUM_NODES: str(self.num_nodes),
            MAIN_ADDR: self.main_addr,
            MAIN_PORT: str(self.main_port),
            ATTEMPT: str(self.attempt),
            KEEP_LAST: str(self.keep_last),
        }
        if node_rank:
            env[NODE_RANK] = str(self.node_rank)
        if not self.log_to_store:
            env[LOG_TO_STORE] = "0"
        if self.device is not None:
            env[DEVICE] = self.device
        if self.job_tag is not None:
            env[JOB_TAG] = self.job_tag
        if self.resume_dir is not None:
            env[RESUME_DIR] = str(self.resume_dir)
        if self.hang_timeout is not None:
            env[HANG_TIMEOUT] = f"{self.hang_timeout:g}"
        if self.rank_log_bytes is not None:
            env[RANK_LOG_BYTES] = str(self.rank_log_bytes)
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RuntimeEnv:
        """Read the variables; :class:`RuntimeEnvError` names a missing or bad one."""
        run_dir = env.get(RUN_DIR)
        if not run_dir:
            raise RuntimeEnvError(f"{RUN_DIR} is not set (is this process part of a job?)")
        index = env.get(COMPLETION_INDEX) or env.get(NODE_RANK) or "0"
        return cls(
            run_dir=Path(run_dir),
            node_rank=_int(COMPLETION_INDEX if env.get(COMPLETION_INDEX) else NODE_RANK, index),
            num_nodes=_int(NUM_NODES, env.get(NUM_NODES, "1"), minimum=1),
            main_addr=env.get(MAIN_ADDR) or "127.0.0.1",
            main_port=_int(MAIN_PORT, env.get(MAIN_PORT, str(DEFAULT_MAIN_PORT)), minimum=1),
            attempt=_int(ATTEMPT, env.get(ATTEMPT, "1"), minimum=1),
            keep_last=_int(KEEP_LAST, env.get(KEEP_LAST, str(DEFAULT_KEEP_LAST)), minimum=1),
            log_to_store=env.get(LOG_TO_STORE, "1") != "0",
            device=env.get(DEVICE) or None,
            job_tag=env.get(JOB_TAG) or None,
            resume_dir=Path(env[RESUME_DIR]) if env.get(RESUME_DIR) else None,
            hang_timeout=_seconds(HANG_TIMEOUT, env.get(HANG_TIMEOUT)),
            rank_log_bytes=(
                _int(RANK_LOG_BYTES, env[RANK_LOG_BYTES], minimum=1)
                if env.get(RANK_LOG_BYTES)
                else None
            ),
        )

    @classmethod
    def current(cls, env: Mapping[str, str] | None = None) -> RuntimeEnv:
        """This process's job, or outside a job ``./.aviflow/run`` (one node, attempt 1)."""
        env = os.environ if env is None else env
        if env.get(RUN_DIR):
            return cls.from_env(env)
        return cls(run_dir=Path.cwd() / OUTSIDE_JOB_DIR, device=env.get(DEVICE) or None)

    def with_changes(self, **changes: object) -> RuntimeEnv:
        return replace(self, **changes)  # type: ignore[arg-type]


def process_rank(env: Mapping[str, str] | None = None) -> int:
    """This process's global rank (``RANK``, set by ``accelerate launch``; 0 outside one)."""
    env = os.environ if env is None else env
    return _int(PROCESS_RANK, env.get(PROCESS_RANK) or "0")


def without_runtime(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` minus every variable this module owns (a fresh base for a child's env)."""
    return {k: v for k, v in env.items() if k not in NAMES and k != COMPLETION_INDEX}


def _seconds(name: str, text: str | None) -> float | None:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise RuntimeEnvError(f"{name}={text!r} is not a number of seconds") from None
    if not value > 0:
        raise RuntimeEnvError(f"{name}={value} must be above 0")
    return value


def _int(name: str, text: str, minimum: int = 0) -> int:
    try:
        value = int(text)
    except ValueError:
        raise RuntimeEnvError(f"{name}={text!r} is not an integer") from None
    if value < minimum:
        raise RuntimeEnvError(f"{name}={value} must be at least {minimum}")
    return value
