"""``python -m aviflow.examples.demo``: the README's first job.

Submits ``demo.yaml`` (2 nodes x 2 processes of a tiny model) to the local backend, follows
the loss as it is logged, then prints the latest checkpoint and the GPU-seconds allocated.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import aviflow
from aviflow.backends._store import StoreReads


def main() -> int:
    spec = Path(__file__).with_name("demo.yaml")
    job = aviflow.submit(spec)
    where = job.backend.run_dir(job.id).path if isinstance(job.backend, StoreReads) else "-"
    print(f"submitted {job.id} (run store: {where})", flush=True)
    cursor, last_state = 0, None
    while True:
        state = job.status
        if state != last_state:
            print(f"  state: {state.value}", flush=True)
            last_state = state
        new, cursor = job.metric_batch(cursor)  # only the rows logged since the last read
        for row in new:
            if row.step == 1 or row.step % 10 == 0:
                print(f"  step {row.step:3d}  loss {row.values['loss']:.4f}", flush=True)
        if state.is_finished():
            break
        time.sleep(0.5)
    rows = job.metric_rows()
    if state != aviflow.JobState.SUCCEEDED:
        print(job.logs(tail=40), file=sys.stderr)
        print(f"demo job {job.id} ended {state.value}", file=sys.stderr)
        return 1
    first, last = rows[0]["loss"], rows[-1]["loss"]
    print(f"loss went from {first:.4f} to {last:.4f} over {len(rows)} steps")
    print(f"latest checkpoint: {job.checkpoint_path()}")
    print(
        f"GPU-seconds allocated: {job.usage().gpu_seconds:.1f} "
        f"({job.spec.spec.nodes} nodes x {job.spec.spec.gpus_per_node} GPUs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
