"""A tiny distributed training job: fit y = 3x - 1 + noise with a 2-layer MLP.

Runs unchanged on one CPU, on N processes with gloo, or on an HGX pool. Knobs (env):
TINY_STEPS (default 60), TINY_CKPT_EVERY (20), TINY_STEP_SLEEP (0, seconds per step),
TINY_FAIL_RANK / TINY_FAIL_STEP (raise on that rank at that step: for failure tests),
TINY_HANG_RANK / TINY_HANG_STEP (that rank stops making progress there, in attempt 1 only:
for hang tests).
"""

import os
import time

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed

import aviflow
from aviflow.runtime.env import RuntimeEnv

steps = int(os.environ.get("TINY_STEPS", "60"))
ckpt_every = int(os.environ.get("TINY_CKPT_EVERY", "20"))
step_sleep = float(os.environ.get("TINY_STEP_SLEEP", "0"))
fail_rank = int(os.environ.get("TINY_FAIL_RANK", "-1"))
fail_step = int(os.environ.get("TINY_FAIL_STEP", "-1"))
hang_rank = int(os.environ.get("TINY_HANG_RANK", "-1"))
hang_step = int(os.environ.get("TINY_HANG_STEP", "-1"))

first_attempt = RuntimeEnv.current().attempt == 1
accelerator = Accelerator(log_with=aviflow.tracker())
accelerator.init_trackers("tiny-regression", config={"steps": steps})
set_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
model, optimizer = accelerator.prepare(model, optimizer)

start = (aviflow.resume(accelerator) or 0) + 1
if start > 1:
    accelerator.print(f"resumed from step {start - 1}")

for step in range(start, steps + 1):
    gen = torch.Generator().manual_seed(step * 1000 + accelerator.process_index)
    x = torch.rand(64, 1, generator=gen) * 2 - 1
    y = 3 * x - 1 + 0.01 * torch.randn(64, 1, generator=gen)
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    accelerator.backward(loss)
    optimizer.step()
    if accelerator.process_index == fail_rank and step == fail_step:
        raise RuntimeError(f"injected failure on rank {fail_rank} at step {step}")
    if accelerator.process_index == hang_rank and step == hang_step and first_attempt:
        time.sleep(24 * 3600)  # a rank stuck outside any collective: the others wait for it
    mean_loss = accelerator.reduce(loss.detach(), reduction="mean").item()
    accelerator.log({"loss": mean_loss}, step=step)
    if step % 10 == 0 or step == 1:
        accelerator.print(f"step {step:4d}  loss {mean_loss:.4f}")
    if step % ckpt_every == 0:
        aviflow.save_checkpoint(accelerator, step)
    if step_sleep:
        time.sleep(step_sleep)

accelerator.end_training()
accelerator.print("done")
