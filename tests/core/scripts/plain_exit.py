# The rank-exit regression's script (tests/core/test_rank_exit.py, bench/rank_exit.py): a plain
# accelerate script with no aviflow import, no end_training(), no destroy_process_group().
# The race is lost when the worker asks for the GIL less than a switch interval (5 ms) before
# the main thread starts finalizing; a long switch interval takes the load out of it: a waiting
# worker never forces the main thread to hand over the GIL, so every rank whose worker frees
# that last work after the main thread has moved on aborts (when the interpreter finalizes).
# Nothing is printed after the loop (a write releases the GIL): rank 0 is exposed like the rest.
import sys

sys.setswitchinterval(5.0)

import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402

accelerator = Accelerator()
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
model, optimizer = accelerator.prepare(model, optimizer)
accelerator.print("training")
for _step in range(20):
    x = torch.randn(16, 8)
    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
