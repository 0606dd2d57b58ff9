"""Benchmark workload: a small MLP trained with accelerate (run on every rank).

BENCH_MARK: file where rank 0 writes the wall time of its first completed step.
BENCH_STEPS: steps to run; BENCH_HELPERS=1: aviflow tracker + checkpoints every
BENCH_CKPT_EVERY steps; BENCH_OUT: file where rank 0 writes the mean step time (seconds)
over the steps after the first 10.
"""

import json
import os
import time

import torch
from accelerate import Accelerator


def main() -> None:
    helpers = os.environ.get("BENCH_HELPERS") == "1"
    steps = int(os.environ.get("BENCH_STEPS", "1"))
    ckpt_every = int(os.environ.get("BENCH_CKPT_EVERY", "100"))
    if helpers:
        import aviflow

        accelerator = Accelerator(log_with=aviflow.tracker())
        accelerator.init_trackers("bench")
    else:
        accelerator = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    x, y = torch.randn(128, 256), torch.randn(128, 1)
    times = []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        if helpers:
            accelerator.log({"loss": loss.item()}, step=step)
            if step % ckpt_every == 0:
                aviflow.save_checkpoint(accelerator, step)
        times.append(time.perf_counter() - t0)
        if step == 1 and accelerator.is_main_process and os.environ.get("BENCH_MARK"):
            with open(os.environ["BENCH_MARK"] + ".tmp", "w") as f:
                f.write(repr(time.time()))
            os.replace(os.environ["BENCH_MARK"] + ".tmp", os.environ["BENCH_MARK"])
    accelerator.wait_for_everyone()
    if accelerator.is_main_process and os.environ.get("BENCH_OUT"):
        steady = times[10:] or times
        with open(os.environ["BENCH_OUT"], "w") as f:
            json.dump({"mean_step_s": sum(steady) / len(steady), "steps": len(steady)}, f)


if __name__ == "__main__":
    main()
