"""A rank's use sampler: a daemon thread that writes, every :data:`SAMPLE_SECONDS`, what this
rank uses of what it holds to ``heartbeats/attempt-<a>-rank-<r>.usage.json`` (one small
record, replaced each time: bounded however long the job runs; read back by the driver
through :func:`aviflow.usage.read_samples`).

Where an NVIDIA GPU is present (NVML, from the ``nvidia-ml-py`` package, imported only here
and only if installed) the record is this rank's device's utilization, memory used/total and
power; otherwise it is this process's CPU utilization of the cores it was given (CPU time over
wall time x ``usable cores / local ranks``) and its RSS against the node's memory. A sample
costs a few system calls; a failure to sample or write is skipped, never raised into training.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from aviflow.store import RunDir, atomic_write

SAMPLE_SECONDS = 2.0


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    try:
        return int(env.get(name, ""))
    except ValueError:
        return default


def cores_per_rank(env: Mapping[str, str], usable: int) -> int:
    """The cores one rank of this node counts as given: the usable ones shared evenly."""
    local = max(1, _env_int(env, "LOCAL_WORLD_SIZE", 1))
    return max(1, usable // local)


def device_index(env: Mapping[str, str]) -> int:
    """This rank's GPU as NVML numbers it: ``CUDA_VISIBLE_DEVICES[LOCAL_RANK]`` when that is
    a list of indexes, else ``LOCAL_RANK``."""
    local = max(0, _env_int(env, "LOCAL_RANK", 0))
    visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if local < len(visible) and visible[local].isdigit():
        return int(visible[local])
    return local


def cpu_util(cpu_before: float, cpu_now: float, wall: float, cores: int) -> float:
    """Percent of ``cores`` busy over ``wall`` seconds, from the process's CPU seconds."""
    if wall <= 0:
        return 0.0
    return max(0.0, min(100.0, 100.0 * (cpu_now - cpu_before) / (wall * cores)))


def cgroup_cores(text: str) -> int | None:
    """The cores a cgroup v2 ``cpu.max`` (``"200000 100000"``, or ``"max 100000"``) allows,
    rounded up; None without a limit."""
    parts = text.split()
    if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit() or parts[1] == "0":
        return None
    return max(1, -(-int(parts[0]) // int(parts[1])))


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by its cgroup's CPU limit
    (a pod's ``limits.cpu``)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            limit = cgroup_cores(f.read(64))
    except OSError:
        limit = None
    return max(1, min(usable, limit) if limit is not None else usable)


def _rss() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _node_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def nvml_reader(index: int) -> Callable[[], dict[str, Any]] | None:
    """A function reading GPU ``index``'s use through NVML, or None without NVML or GPU."""
    try:
        import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py (train extra)

        pynvml.nvmlInit()
        if index >= pynvml.nvmlDeviceGetCount():
            return None
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # no library, no driver, no device: sample the CPU
        return None

    def read() -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "gpu"}
        out["util"] = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        out["mem"], out["mem_total"] = int(mem.used), int(mem.total)
        try:
            out["power"] = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        except Exception:  # not every board reports power
            pass
        return out

    return read


class Sampler(threading.Thread):
    def __init__(
        self, run: RunDir, attempt: int, rank: int, env: Mapping[str, str], every: float
    ) -> None:
        super().__init__(name="aviflow-sampler", daemon=True)
        self.path = run.usage_path(attempt, rank)
        self.every = every
        self.stop_event = threading.Event()
        self.gpu = nvml_reader(device_index(env))
        self.cores = cores_per_rank(env, usable_cores())
        self.mem_total = _node_memory()

    def sample(self, cpu_before: float, wall_before: float) -> dict[str, Any]:
        if self.gpu is not None:
            try:
                return self.gpu()
            except Exception:
                self.gpu = None  # the device went away: fall back to the CPU from now on
        util = cpu_util(cpu_before, _cpu_seconds(), time.monotonic() - wall_before, self.cores)
        out: dict[str, Any] = {"kind": "cpu", "util": round(util, 2), "cores": self.cores}
        rss = _rss()
        if rss is not None:
            out["mem"] = rss
        if self.mem_total is not None:
            out["mem_total"] = self.mem_total
        return out

    def run(self) -> None:
        cpu, wall = _cpu_seconds(), time.monotonic()
        while not self.stop_event.wait(self.every):
            try:
                record = self.sample(cpu, wall)
                record["time"] = time.time()
                atomic_write(self.path, json.dumps(record))
            except Exception:
                pass  # a full or unreachable run store: sample again next time
            cpu, wall = _cpu_seconds(), time.monotonic()


def start(run: RunDir, attempt: int, rank: int, every: float = SAMPLE_SECONDS) -> Sampler:
    """Start this rank's sampler."""
    sampler = Sampler(run, attempt, rank, os.environ, every)
    sampler.path.parent.mkdir(parents=True, exist_ok=True)
    sampler.start()
    return sampler
