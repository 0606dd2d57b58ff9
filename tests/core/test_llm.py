"""The LLM recipe (aviflow/examples/llm.py): its pure parts, then real jobs on the local
backend, CPU and gloo: FSDP2 on 2 nodes x 2 processes with the parameters and the checkpoint
shown to be sharded, a kill -9 of a rank that the group survives from its sharded checkpoint,
a resume of that checkpoint on 1 node at the right step and sample, and DDP.

On this machine accelerate runs the fsdp preset's ranks as plain gloo processes, so the
recipe shards with torch's ``fully_shard`` itself: the tests check the DTensors each rank
holds and the checkpoint's shards, not the configuration.
"""

from __future__ import annotations

import math
import os
import re
import signal
import time
from pathlib import Path

import pytest
from llm_kit import SEQ, TINY, G

import aviflow
from aviflow.examples import llm
from aviflow.records import JobState

LLM = Path(llm.__file__)
WAIT = 420  # seconds; a loaded 2-core machine can be slow to start 4 torch processes


# -- the pure parts --------------------------------------------------------------------------


def _read(size: int, world: int, micro: int, start: int, samples: int) -> list[int]:
    """The stream as ``world`` ranks read it from ``start``, interleaved back in order."""
    ranks = [iter(llm.ShardedSampler(size, r, world, micro, 7, start)) for r in range(world)]
    out: list[int] = []
    while len(out) < samples:
        for it in ranks:
            out += [next(it) for _ in range(micro)]
    return out[:samples]


def test_the_sampler_reads_one_stream_whatever_the_number_of_ranks():
    four = _read(40, 4, 2, 0, 80)
    assert _read(40, 2, 2, 0, 80) == four == _read(40, 1, 2, 0, 80)
    assert sorted(four[:40]) == list(range(40)) == sorted(four[40:])  # each epoch once
    assert four[:40] != four[40:]  # and reshuffled


def test_a_resumed_sampler_reads_the_rest_of_the_stream_on_any_number_of_ranks():
    whole = _read(40, 4, 2, 0, 64)
    assert _read(40, 2, 2, 16, 48) == whole[16:]  # 4 ranks stopped after 16, 2 go on
    assert _read(40, 4, 2, 32, 32) == whole[32:]
    with pytest.raises(ValueError, match="not a multiple of 8"):
        next(iter(llm.ShardedSampler(40, 0, 4, 2, 0, start=4)))


def test_gradient_accumulation_keeps_the_global_batch():
    cfg = llm.Config(micro_batch=2, global_batch=16)
    assert [cfg.accumulation(w) for w in (1, 2, 4, 8)] == [8, 4, 2, 1]
    with pytest.raises(ValueError, match="not a multiple of LLM_MICRO_BATCH x ranks = 2 x 3"):
        cfg.accumulation(3)


def test_the_tokenizer_is_made_from_the_corpus_the_same_everywhere():
    text = llm.tiny_corpus(200, seed=1)
    assert text == llm.tiny_corpus(200, seed=1)
    a, b = llm.corpus_tokenizer(text), llm.corpus_tokenizer(text)
    assert a.get_vocab() == b.get_vocab()
    ids = a("the quick model trains the node .")["input_ids"]
    assert a.decode(ids) == "the quick model trains the node ."
    assert a.convert_ids_to_tokens(a("zebra")["input_ids"]) == ["<unk>"]
    samples = llm.blocks(a(text)["input_ids"], 16)
    train, held_out = llm.split(samples, 8)
    assert samples.shape[1] == 16 and len(held_out) == 8 and len(train) == len(samples) - 8


def test_the_learning_rate_warms_up_then_decays_by_the_step_alone():
    cfg = llm.Config(steps=100, lr=1.0)
    assert llm.lr_at(5, cfg) == pytest.approx(0.5)
    assert llm.lr_at(10, cfg) == pytest.approx(1.0)
    assert llm.lr_at(100, cfg) == pytest.approx(0.1)


# -- jobs ------------------------------------------------------------------------------------


def _job(name, nodes, gpus, env=None, **spec):
    return {
        "metadata": {"name": name},
        "spec": {
            "nodes": nodes,
            "gpusPerNode": gpus,
            "scriptFile": str(LLM),
            "env": {**TINY, **(env or {})},
            **spec,
        },
    }


def _shards(log: str) -> tuple[int, int, int, int]:
    """(local elements, total elements, DTensor parameters, parameters) from a rank's log."""
    m = re.search(
        r"fsdp2: rank \d+ holds (\d+) of (\d+) parameter elements; (\d+) of (\d+) parameters "
        r"are DTensors \(Shard\(dim=0\),\)$",
        log,
        re.M,
    )
    assert m, log[-2000:]
    local, total, dtensors, params = map(int, m.groups())
    return local, total, dtensors, params


def _chunks(checkpoint: Path) -> dict[str, int]:
    """Each model tensor of a Distributed Checkpoint: in how many chunks it was written."""
    from torch.distributed.checkpoint import FileSystemReader

    meta = FileSystemReader(str(checkpoint)).read_metadata().state_dict_metadata
    return {k: len(v.chunks) for k, v in meta.items() if k.startswith("model.")}


@pytest.mark.training
def test_fsdp_on_two_nodes_shards_survives_kill_9_and_resumes_on_one_node(
    local_backend, rank_process
):
    first = aviflow.submit(
        _job(
            "llm-fsdp",
            2,
            2,
            env={"LLM_STEP_SLEEP": "0.5"},
            accelerate={"strategy": "fsdp"},
            maxRestarts=1,
        ),
        backend=local_backend,
    )
    # kill -9 one rank once the sharded checkpoint of step 4 is complete
    deadline = time.monotonic() + WAIT
    while not first.checkpoints():
        assert time.monotonic() < deadline and not first.status.is_finished(), first.logs(tail=40)
        time.sleep(0.1)
    os.kill(rank_process(first.id, 1).pid, signal.SIGKILL)
    assert first.wait(timeout=WAIT) == JobState.SUCCEEDED, first.logs(tail=40)
    restart = next(e for e in first.events() if e.type == "RESTARTING")
    assert (restart.attempt, restart.failure.rank) == (1, 1)
    assert "resumed from step 4 at sample 64" in first.logs(rank=0)
    logged = first.metric_rows()
    assert [r["step"] for r in logged if r["attempt"] == 2] == [5, 6, 7, 8]
    # the run read the sample stream once, in order: each step its own G samples
    rows = list({r["step"]: r for r in logged}.values())  # the latest attempt's row per step
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert [r["samples"] for r in rows] == [s * G for s in range(1, 9)]
    assert [r["tokens"] for r in rows] == [s * G * SEQ for s in range(1, 9)]
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.5
    evals = [r["eval_ppl"] for r in rows if "eval_ppl" in r]
    assert len(evals) == 2 and all(math.isfinite(p) for p in evals) and evals[1] < evals[0]

    # the parameters are sharded: every one a DTensor, each rank holding its part of them
    log0 = first.logs(rank=0)
    assert (
        "llm: fsdp2 by torch (accelerate has no FSDP here); DistributedType.MULTI_CPU x 4" in log0
    )
    held = [_shards(first.logs(rank=r)) for r in range(4)]
    total = held[0][1]
    assert all(h[1] == total and h[2] == h[3] > 0 for h in held)
    assert sum(h[0] for h in held) == total and all(0 < h[0] < total for h in held)

    # the checkpoint is sharded: one file per rank, every weight written in 4 chunks
    ckpt = first.checkpoint_path()
    assert [c.step for c in first.checkpoints()] == [4, 8]
    assert sorted(p.name for p in ckpt.glob("*.distcp")) == [f"__{r}_0.distcp" for r in range(4)]
    chunks = _chunks(ckpt)
    assert chunks and set(chunks.values()) == {4}, chunks
    assert (ckpt / "data.json").read_text() == '{"samples": 128}'

    # 1 node x 2 processes from the 2-node checkpoint of step 4: steps 5-8 on the same samples
    second = aviflow.submit(
        _job(
            "llm-fsdp-1-node",
            1,
            2,
            accelerate={"strategy": "fsdp"},
            resumeFrom={"job": first.id, "step": 4},
        ),
        backend=local_backend,
    )
    assert second.wait(timeout=WAIT) == JobState.SUCCEEDED, second.logs(tail=40)
    assert "resumed from step 4 at sample 64" in second.logs(rank=0)
    assert "x 2, 4 forward passes of 2 per rank per step" in second.logs(rank=0)
    again = second.metric_rows()
    assert [r["step"] for r in again] == [5, 6, 7, 8]
    assert [r["samples"] for r in again] == [s * G for s in range(5, 9)]
    for a, b in zip(rows[4:], again, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-3)
    assert set(_chunks(second.checkpoint_path()).values()) == {2}


@pytest.mark.training
def test_ddp_trains_and_writes_a_whole_checkpoint(local_backend):
    job = aviflow.submit(_job("llm-ddp", 1, 2, env={"LLM_STEPS": "4"}), backend=local_backend)
    assert job.wait(timeout=WAIT) == JobState.SUCCEEDED, job.logs(tail=40)
    log0 = job.logs(rank=0)
    assert "llm: ddp; DistributedType.MULTI_CPU x 2, 4 forward passes" in log0
    assert "fsdp2:" not in log0
    rows = job.metric_rows()
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[-1]["loss"] < rows[0]["loss"] and math.isfinite(rows[-1]["eval_ppl"])
    assert set(_chunks(job.checkpoint_path()).values()) == {1}


def test_the_shipped_llm_spec_asks_for_fsdp_on_two_nodes():
    from aviflow.spec import TrainJob

    job = TrainJob.load(LLM.with_name("llm.yaml"))
    assert (job.spec.nodes, job.spec.gpus_per_node) == (2, 2)
    assert job.spec.accelerate.strategy == "fsdp"
    assert LLM.with_name(job.spec.script_file).is_file()
