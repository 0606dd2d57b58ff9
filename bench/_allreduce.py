"""Benchmark workload for ``bench/gpu.py``: all-reduce bus bandwidth, one process per GPU
(started by ``torch.distributed.run``; NCCL on CUDA, gloo on the CPU smoke run).

BENCH_DEVICE: ``cuda`` or ``cpu``; BENCH_SIZES: comma-separated message sizes in bytes;
BENCH_ITERS: timed all-reduces per size (after a few untimed ones); BENCH_OUT: file where
rank 0 writes ``[{"bytes", "seconds", "algbw", "busbw"}, ...]`` (bytes/s).

busbw = algbw x 2(n-1)/n, as nccl-tests define it: the bytes each rank moves over its link
in a ring all-reduce, so the figure compares with the link's bandwidth whatever n is.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

WARMUP = 3


def bus_factor(world: int) -> float:
    """busbw / algbw for an all-reduce on ``world`` ranks."""
    return 2 * (world - 1) / world


def main() -> None:
    device = os.environ.get("BENCH_DEVICE", "cuda")
    sizes = [int(s) for s in os.environ["BENCH_SIZES"].split(",")]
    iters = int(os.environ.get("BENCH_ITERS", "20"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        where = torch.device("cuda", local)
        sync = torch.cuda.synchronize
    else:
        dist.init_process_group("gloo")
        where = torch.device("cpu")

        def sync() -> None:
            pass

    world = dist.get_world_size()
    rows = []
    for size in sizes:
        x = torch.ones(size // 4, dtype=torch.float32, device=where)
        for _ in range(WARMUP):
            dist.all_reduce(x)
        sync()
        dist.barrier()
        began = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        sync()
        took = (time.perf_counter() - began) / iters
        # the slowest rank's time is the collective's
        slowest = torch.tensor([took], dtype=torch.float64, device=where)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        seconds = float(slowest.item())
        algbw = x.numel() * 4 / seconds
        bus = algbw * bus_factor(world)
        rows.append({"bytes": x.numel() * 4, "seconds": seconds, "algbw": algbw, "busbw": bus})
    if dist.get_rank() == 0:
        Path(os.environ["BENCH_OUT"]).write_text(json.dumps({"world": world, "rows": rows}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
