"""A rank whose script finished must exit 0: never abort, fail or restart the job by exiting.

Ranks used to die at exit with ``terminate called without an active exception`` (SIGABRT):
a gloo worker thread (``pt_gloo_runloop``) that frees the last work of the final backward
drops the ``contextvars.Context`` autograd stashed in that work's ``at::ThreadLocalState``,
which takes the GIL; a thread waiting for the GIL when ``Py_FinalizeEx`` starts is ended
with ``pthread_exit``, and that unwinding through the work's ``noexcept`` destructor calls
``std::terminate``. See :mod:`aviflow.runtime.rank` for the fix.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import aviflow
from aviflow.records import JobState

pytestmark = pytest.mark.training

JOBS = 10
WAIT = 1200  # seconds for all of them: a loaded 2-core machine takes minutes per 2 x 2 job

# A plain accelerate script: no aviflow import, no end_training(), no destroy_process_group().
# The race is lost when the worker asks for the GIL less than a switch interval (5 ms) before
# the main thread starts finalizing; on a loaded machine the worker usually gets the GIL
# first and a run aborts only now and then (1 in 6 jobs in the issue, rarer here). A long
# switch interval takes the load out of it: a waiting worker never forces the main thread to
# hand over the GIL, so every rank whose worker frees that last work after the main thread
# has moved on aborts: 4 of 16 jobs before the fix, so 10 jobs miss it about 6% of the time
# (a suite-time compromise: each 2 x 2 job costs ~30 s on 2 cores).
# Nothing is printed after the loop (a write releases the GIL): rank 0 is exposed like the rest.
PLAIN_SCRIPT = """\
import sys

sys.setswitchinterval(5.0)

import torch
from accelerate import Accelerator

accelerator = Accelerator()
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
model, optimizer = accelerator.prepare(model, optimizer)
accelerator.print("training")
for step in range(20):
    x = torch.randn(16, 8)
    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
"""


@pytest.mark.timeout(WAIT + 120)
def test_finished_plain_accelerate_script_exits_cleanly_every_time(
    local_backend, tmp_path: Path, leftover_processes
):
    script = tmp_path / "plain_train.py"
    script.write_text(PLAIN_SCRIPT)
    jobs = [
        aviflow.submit(
            {
                "metadata": {"name": f"plain-exit-{i}"},
                "spec": {"nodes": 2, "gpusPerNode": 2, "scriptFile": str(script)},
            },
            backend=local_backend,
        )
        for i in range(JOBS)
    ]
    bad = []
    for job in jobs:
        state = job.wait(timeout=WAIT)
        kinds = [e.type for e in job.events()]
        aborted = [r for r in range(4) if "terminate called" in job.logs(rank=r)]
        if (
            state != JobState.SUCCEEDED
            or kinds != ["QUEUED", "STARTING", "RUNNING", "SUCCEEDED"]
            or job.usage().attempts != 1
            or aborted
        ):
            bad.append((job.id, state, kinds, job.status_record().message, aborted))
    assert not bad, f"{len(bad)} of {JOBS} finished runs failed at exit: {bad}"
    for job in jobs:
        assert "training" in job.logs(rank=0)
        assert leftover_processes(job.id) == []
