"""The LLM recipe (aviflow/examples/llm.py) as a TrainJob on the test control plane: the
shipped ``llm.yaml`` (2 HGX nodes x 2 processes, ``spec.accelerate.strategy: fsdp``) with
tiny sizes, run by the controller in the built trainer image (which has ``transformers``
and ``tokenizers``: the ``train`` extra), gloo on the CPU.

As on the local backend (tests/core/test_llm.py), accelerate runs the fsdp preset's ranks
as plain gloo processes here, so the recipe shards with torch's ``fully_shard``: the test
checks the DTensors each rank holds and the shards of the checkpoint the pods wrote into
the run store, not the configuration.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from llm_kit import SEQ, TINY, G

from aviflow import api
from aviflow.examples import llm
from aviflow.records import EventType, JobState

pytestmark = pytest.mark.cluster

EXAMPLES = Path(llm.__file__).parent
SHARDS = re.compile(
    r"fsdp2: rank \d+ holds (\d+) of (\d+) parameter elements; (\d+) of (\d+) parameters "
    r"are DTensors \(Shard\(dim=0\),\)$",
    re.M,
)


def test_the_llm_recipe_trains_sharded_on_two_hgx_nodes(make_pool: Any) -> None:
    pool = make_pool()
    shipped = yaml.safe_load((EXAMPLES / "llm.yaml").read_text())
    assert shipped["spec"]["accelerate"] == {"strategy": "fsdp"}
    shipped["spec"]["env"] = {**shipped["spec"]["env"], **TINY}
    job = api.submit(shipped, pool.backend, base_dir=EXAMPLES)
    assert job.wait(timeout=600) is JobState.SUCCEEDED, job.logs(0)
    kinds = [e.type for e in job.events() if e.type is not EventType.USAGE]  # notes, not steps
    assert kinds == [EventType.QUEUED, EventType.STARTING, EventType.RUNNING, EventType.SUCCEEDED]

    # the loss falls and the eval perplexity is finite, the run read each step's samples once
    rows = job.metric_rows()
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert [r["samples"] for r in rows] == [s * G for s in range(1, 9)]
    assert [r["tokens"] for r in rows] == [s * G * SEQ for s in range(1, 9)]
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.5, [r["loss"] for r in rows]
    evals = [r["eval_ppl"] for r in rows if "eval_ppl" in r]
    assert len(evals) == 2 and all(math.isfinite(p) for p in evals) and evals[1] < evals[0]

    # every parameter a DTensor, each of the 4 ranks (2 pods) holding its part
    log0 = job.logs(0)
    assert "llm: fsdp2 by torch (accelerate has no FSDP here); DistributedType.MULTI_CPU x 4" in (
        log0
    )
    held = []
    for rank in range(4):
        m = SHARDS.search(job.logs(rank))
        assert m, job.logs(rank)[-2000:]
        held.append(tuple(map(int, m.groups())))
    total = held[0][1]
    assert all(h[1] == total and h[2] == h[3] > 0 for h in held), held
    assert sum(h[0] for h in held) == total and all(0 < h[0] < total for h in held), held

    # the checkpoint in the run store is sharded: one file per rank, each weight in 4 chunks
    from torch.distributed.checkpoint import FileSystemReader

    assert [c.step for c in job.checkpoints()] == [4, 8]
    ckpt = job.checkpoint_path()
    assert sorted(p.name for p in ckpt.glob("*.distcp")) == [f"__{r}_0.distcp" for r in range(4)]
    meta = FileSystemReader(str(ckpt)).read_metadata().state_dict_metadata
    chunks = {k: len(v.chunks) for k, v in meta.items() if k.startswith("model.")}
    assert chunks and set(chunks.values()) == {4}, chunks
    assert (ckpt / "data.json").read_text() == '{"samples": 128}'
