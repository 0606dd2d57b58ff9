"""The GPU check: what to run once this project has NVIDIA GPUs (no test depends on it).

    make bench-gpu                               # timeout 480 .venv/bin/python bench/gpu.py
    .venv/bin/python bench/gpu.py --device cpu   # the same code path on the CPU: a smoke run

1. Throughput: the LLM recipe (``aviflow/examples/llm.py``: FSDP, bf16, one process per GPU,
   NCCL) through Aviflow's runtime (a job on the local backend: ``python -m aviflow.runtime``,
   its rank wrapper, log capture and heartbeats) vs a bare ``accelerate launch`` of the same
   script with the same arguments and environment (those ``aviflow.runtime.launch`` renders
   for the job), alternated round by round. Tokens/s over the steady steps (after the first
   fifth, before the last, which evaluates and saves) from the recipe's ``tokens`` counter
   and its metric rows' times, which the aviflow tracker writes in both runs. Target: ratio
   aviflow/bare >= 0.98.
2. NVML vs ``nvidia-smi``: once a second through the runs of 1 (both kinds alike), each
   GPU's memory used/total, utilization and power read through NVML (``pynvml``, from
   ``nvidia-ml-py``) and, right after, from ``nvidia-smi --query-gpu=... --format=csv``:
   their means, peaks and largest difference side by side.
3. All-reduce bus bandwidth (NCCL, one process per GPU) when there is more than one GPU:
   busbw = algbw x 2(n-1)/n (``bench/_allreduce.py``).

Sizes: a Llama of hidden 2048, 4 layers, 16 heads, 1,024-token samples, 8 per GPU per pass,
200 steps (about 170M parameters, 8,192 tokens per GPU a step: a few minutes on one H200 by
estimate, much of them starting processes); any ``LLM_*`` variable set in the environment
replaces its default (the recipe's knobs). ``--device cpu`` runs tiny sizes on 2 gloo
processes, bf16 off (about 35 CPU-seconds): it proves the script, not the numbers.
Exit status: 0 measured (the ratio's verdict is printed), 1 a run failed, 2 no CUDA GPU here
(without ``--device cpu``), 124 stopped by ``timeout``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aviflow
from aviflow.backends.local import LocalBackend
from aviflow.examples import llm
from aviflow.paging import read_pages
from aviflow.runtime.env import RuntimeEnv
from aviflow.runtime.launch import accelerate_argv, node_env
from aviflow.spec import TrainJob
from aviflow.store import RunDir

LLM = Path(llm.__file__)
ALLREDUCE = Path(__file__).with_name("_allreduce.py")
TARGET = 0.98
NO_GPU = 2
GPU_SIZES = {"LLM_HIDDEN": "2048", "LLM_LAYERS": "4", "LLM_HEADS": "16", "LLM_SEQ": "1024",
             "LLM_MICRO_BATCH": "8", "LLM_STEPS": "200", "LLM_EVAL_SAMPLES": "8",
             "LLM_LR": "3e-4"}  # fmt: skip
CPU_SIZES = {"LLM_HIDDEN": "32", "LLM_LAYERS": "2", "LLM_HEADS": "2", "LLM_SEQ": "16",
             "LLM_MICRO_BATCH": "2", "LLM_STEPS": "8", "LLM_EVAL_SAMPLES": "8"}  # fmt: skip
GPU_CORPUS, CPU_CORPUS = 50_000, 3_000  # sentences of the recipe's tiny grammar
GPU_ALLREDUCE = [1 << 20, 16 << 20, 256 << 20, 1 << 30]  # bytes
CPU_ALLREDUCE = [1 << 16, 1 << 20]
SMI_FIELDS = ("index", "memory.used", "memory.total", "utilization.gpu", "power.draw")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _say(text: str = "") -> None:
    print(text, flush=True)


# -- what to run ---------------------------------------------------------------------------


def recipe_env(device: str, procs: int, corpus: Path, here: dict[str, str]) -> dict[str, str]:
    """The recipe's knobs: this device's sizes, any ``LLM_*`` set in ``here`` over them, one
    optimizer step = one pass per rank, eval and checkpoint only at the last step."""
    env = dict(GPU_SIZES if device == "cuda" else CPU_SIZES)
    env.update({k: v for k, v in here.items() if k.startswith("LLM_")})
    env.setdefault("LLM_GLOBAL_BATCH", str(int(env["LLM_MICRO_BATCH"]) * procs))
    env.setdefault("LLM_CORPUS", str(corpus))
    env["LLM_EVAL_EVERY"] = env["LLM_CKPT_EVERY"] = env["LLM_STEPS"]
    return env


def job_spec(procs: int, env: dict[str, str], mixed_precision: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "bench-gpu"},
        "spec": {
            "nodes": 1,
            "gpusPerNode": procs,
            "scriptFile": str(LLM),
            "env": env,
            "accelerate": {"strategy": "fsdp", "mixedPrecision": mixed_precision},
        },
    }


def steady_tokens_per_s(rows: Sequence[dict[str, Any]]) -> float:
    """Tokens/s between the end of the first fifth of the steps and the step before the last
    (the last one evaluates; the first ones warm up): from the rows' ``tokens`` and times.

    >>> rows = [{"step": s, "time": 10.0 + s, "tokens": 100 * s} for s in range(1, 11)]
    >>> steady_tokens_per_s(rows)
    100.0
    """
    last = max(r["step"] for r in rows)
    skip = max(1, last // 5)
    steady = sorted((r for r in rows if skip <= r["step"] < last), key=lambda r: r["step"])
    if len(steady) < 2:
        raise ValueError(f"too few steps to time ({last}): raise LLM_STEPS")
    first, end = steady[0], steady[-1]
    return float((end["tokens"] - first["tokens"]) / (end["time"] - first["time"]))


def _llm_line(log: str) -> str:
    return next((ln.strip() for ln in log.splitlines() if ln.startswith("llm: ")), "(no llm: line)")


# -- 1. the recipe, through Aviflow and bare -------------------------------------------------


def run_aviflow(backend: LocalBackend, spec: dict[str, Any]) -> tuple[float, str]:
    """Tokens/s of the recipe as a job on the local backend, and its rank 0's ``llm:`` line."""
    job = aviflow.submit(spec, backend=backend)
    try:
        state = job.wait(timeout=900, poll=2.0)  # little of the CPU the ranks use
    finally:  # stopped (timeout's SIGTERM): the job's processes are in a session of their own
        if not job.status.is_finished():
            job.cancel()
    if state != aviflow.JobState.SUCCEEDED:
        raise RuntimeError(f"the aviflow run failed:\n{job.logs(tail=40)}")
    rate, line = steady_tokens_per_s(job.metric_rows()), _llm_line(job.logs(rank=0))
    shutil.rmtree(backend.run_dir(job.id).checkpoints_dir, ignore_errors=True)
    return rate, line


def bare_command(run: Path, spec: dict[str, Any], gpus: bool) -> tuple[list[str], dict[str, str]]:
    """``accelerate launch`` of the recipe itself (no aviflow runtime, no rank wrapper) with
    the arguments and environment the runtime renders for the same job on one node."""
    node = RuntimeEnv(run_dir=run, main_port=_port())
    job = TrainJob.from_dict(spec)
    argv = accelerate_argv(sys.executable, node, job, [sys.executable, str(LLM)], None)
    return argv, node_env(os.environ, node, job, gpus=gpus)


def run_bare(tmp: Path, spec: dict[str, Any], gpus: bool) -> tuple[float, str]:
    run = tmp / f"bare-{time.time_ns()}"
    run.mkdir()
    argv, env = bare_command(run, spec, gpus)
    log = run / "out.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, env=env, cwd=run, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = proc.wait()
        finally:  # stopped: take the launcher's ranks with it
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
    text = log.read_text(errors="replace")
    if code != 0:
        raise RuntimeError(f"the bare accelerate launch exited {code}:\n{text[-4000:]}")
    rows = read_pages(lambda at: RunDir(run).metrics(at)).items
    rate = steady_tokens_per_s([{"step": r.step, "time": r.time, **r.values} for r in rows])
    shutil.rmtree(run, ignore_errors=True)
    return rate, _llm_line(text)


# -- 2. NVML vs nvidia-smi -------------------------------------------------------------------


def parse_smi(text: str) -> dict[int, dict[str, float | None]]:
    """``nvidia-smi --query-gpu=index,memory.used,... --format=csv,noheader,nounits`` per
    GPU index (a field it cannot read, ``[N/A]``, is None).

    >>> parse_smi("0, 1024, 143771, 97, 512.30\\n1, 0, 143771, 0, [N/A]\\n")[1]
    {'memory.used': 0.0, 'memory.total': 143771.0, 'utilization.gpu': 0.0, 'power.draw': None}
    """
    out: dict[int, dict[str, float | None]] = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) != len(SMI_FIELDS):
            continue
        cells = [c.strip() for c in row]
        try:
            index = int(cells[0])
        except ValueError:
            continue
        values: dict[str, float | None] = {}
        for name, cell in zip(SMI_FIELDS[1:], cells[1:], strict=True):
            try:
                values[name] = float(cell)
            except ValueError:
                values[name] = None
        out[index] = values
    return out


def read_smi() -> dict[int, dict[str, float | None]]:
    """``nvidia-smi``'s readings now ({} when it cannot be run)."""
    try:
        proc = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_smi(proc.stdout) if proc.returncode == 0 else {}


class GpuSampler:
    """Reads NVML then ``nvidia-smi`` once a second, on a thread, between start and stop."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.samples: list[tuple[dict[int, dict[str, float | None]], dict[int, Any]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-sampler", daemon=True)

    def read_nvml(self) -> dict[int, dict[str, float | None]]:
        """Each GPU's readings through NVML (a reading it refuses is None). Memory as
        ``nvmlMemory_v2`` where the bindings have it: ``used`` without the driver's reserved
        part, as ``nvidia-smi`` shows it (v1's ``used`` is total - free)."""
        nv, out = self.nvml, {}

        def read(call: Any, *args: Any) -> Any:
            try:
                return call(*args)
            except (nv.NVMLError, TypeError):  # TypeError: bindings without ``version``
                return None

        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            v2 = getattr(nv, "nvmlMemory_v2", None)
            mem = read(nv.nvmlDeviceGetMemoryInfo, h, v2) if v2 is not None else None
            mem = mem or read(nv.nvmlDeviceGetMemoryInfo, h)
            util = read(nv.nvmlDeviceGetUtilizationRates, h)
            power = read(nv.nvmlDeviceGetPowerUsage, h)
            out[i] = {
                "memory.used": mem.used / 2**20 if mem else None,
                "memory.total": mem.total / 2**20 if mem else None,
                "utilization.gpu": float(util.gpu) if util else None,
                "power.draw": power / 1000.0 if power is not None else None,  # mW
            }
        return out

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self.samples.append((self.read_nvml(), read_smi()))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def nvml_table(samples: Sequence[tuple[dict[int, Any], dict[int, Any]]]) -> list[str]:
    """Per GPU and field: the mean and the peak of NVML's and of ``nvidia-smi``'s readings,
    and their largest difference in one sample (read a moment apart: utilization and power
    move).

    >>> s = [({0: {"memory.used": 100.0}}, {0: {"memory.used": 101.0}})] * 2
    >>> nvml_table(s)[-1]
    '  0  memory.used (MiB)          100.0      101.0      100.0      101.0         1.0'
    """
    units = {"memory.used": "MiB", "memory.total": "MiB", "utilization.gpu": "%", "power.draw": "W"}
    lines = [
        f"gpu  {'field':<21}  {'NVML mean':>9}  {'smi mean':>9}  {'NVML peak':>9}  "
        f"{'smi peak':>9}  {'max |diff|':>10}"
    ]
    for gpu in sorted(samples[0][0]) if samples else []:
        for field in SMI_FIELDS[1:]:
            pairs = [(a.get(gpu, {}).get(field), b.get(gpu, {}).get(field)) for a, b in samples]
            pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
            if not pairs:
                continue
            nv, smi = [p[0] for p in pairs], [p[1] for p in pairs]
            diff = max(abs(x - y) for x, y in pairs)
            label = f"{field} ({units[field]})"
            lines.append(
                f"{gpu:>3}  {label:<21}  {statistics.fmean(nv):>9.1f}  {statistics.fmean(smi):>9.1f}"
                f"  {max(nv):>9.1f}  {max(smi):>9.1f}  {diff:>10.1f}"
            )
    return lines


def load_nvml() -> Any:
    """``pynvml`` initialised, or None (with the reason said) when it is not installed."""
    try:
        import pynvml
    except ImportError:
        _say(
            "NVML: pynvml is not installed here (nvidia-ml-py, in the lock's train extra: "
            "make venv); the NVML readings are skipped and nvidia-smi's alone are shown"
        )
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        _say(f"NVML: cannot start it ({exc}); the NVML readings are skipped")
        return None
    return pynvml


# -- 3. all-reduce ---------------------------------------------------------------------------


def allreduce(tmp: Path, device: str, procs: int) -> dict[str, Any]:
    out = tmp / "allreduce.json"
    sizes = GPU_ALLREDUCE if device == "cuda" else CPU_ALLREDUCE
    env = {**os.environ, "BENCH_DEVICE": device, "BENCH_OUT": str(out),
           "BENCH_SIZES": ",".join(map(str, sizes)),
           "BENCH_ITERS": "20" if device == "cuda" else "5"}  # fmt: skip
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={procs}", str(ALLREDUCE)]  # fmt: skip
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"the all-reduce run exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


# -- the check -------------------------------------------------------------------------------


def gpus_or_refuse(device: str) -> int:
    """The number of GPUs (or of CPU processes for the smoke run); 0 when there is no CUDA."""
    if device == "cpu":
        return 2
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return 0
    return int(torch.cuda.device_count())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: a smoke run of the same code path (gloo, tiny sizes)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=None, help="default: 2 on cuda, 1 on cpu")
    ns = parser.parse_args(argv)
    device = ns.device
    procs = gpus_or_refuse(device)
    if procs == 0:
        print(
            "bench/gpu.py: no CUDA GPU here (torch.cuda.is_available() is False): this check "
            "needs NVIDIA GPUs and their driver. `bench/gpu.py --device cpu` runs the same code "
            "path on the CPU (gloo, tiny sizes) to prove the script; it measures nothing.",
            file=sys.stderr,
        )
        return NO_GPU
    # `timeout 480` stops it with SIGTERM: unwind, so that the runs' processes are stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    rounds = ns.rounds or (2 if device == "cuda" else 1)
    gpus = device == "cuda"
    mixed = "bf16" if gpus else "no"
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="aviflow-bench-gpu-") as d:
        tmp = Path(d)
        corpus = tmp / "corpus.txt"
        corpus.write_text(llm.tiny_corpus(GPU_CORPUS if gpus else CPU_CORPUS, seed=0))
        env = recipe_env(device, procs, corpus, dict(os.environ))
        spec = job_spec(procs, env, mixed)
        backend = LocalBackend(root=tmp / "runs", capacity=procs)
        _say(f"device: {device} x {procs}, FSDP, mixed precision {mixed}, {rounds} round(s)")
        _say("recipe: " + " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k != "LLM_CORPUS"))
        _say("bare:   " + " ".join(bare_command(tmp, spec, gpus)[0][1:]))
        nvml = load_nvml() if gpus else None
        # through every run of both kinds, so that its cost falls on both alike
        sampler = GpuSampler(nvml) if nvml is not None else None
        if sampler is not None:
            sampler.start()
        via: list[float] = []
        bare: list[float] = []
        try:
            for r in range(rounds):
                rate, line = run_aviflow(backend, spec)
                via.append(rate)
                _say(f"round {r + 1}: aviflow {rate:,.0f} tokens/s   [{line}]")
                rate, bare_line = run_bare(tmp, spec, gpus)
                bare.append(rate)
                _say(f"round {r + 1}: bare    {rate:,.0f} tokens/s   [{bare_line}]")
                if bare_line != line:  # e.g. a node the runtime did not see GPUs on
                    raise RuntimeError("the two runs did not run alike: see their llm: lines")
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
        finally:
            if sampler is not None:
                sampler.stop()
        ratio = statistics.median(via) / statistics.median(bare)
        verdict = f"{'meets' if ratio >= TARGET else 'MISSES'} the target >= {TARGET}"
        if not gpus:  # 2 CPU processes of tiny steps, on a shared machine
            verdict = f"a smoke run on the CPU: the target >= {TARGET} is for GPUs"
        _say(
            f"\n1. tokens/s aviflow/bare = {ratio:.3f} ({verdict}) "
            f"[median {statistics.median(via):,.0f} vs {statistics.median(bare):,.0f}]"
        )

        _say("\n2. GPU readings, NVML vs nvidia-smi, through the runs of 1")
        if not gpus:
            _say("   skipped: --device cpu has no GPU to read")
        elif sampler is None or not sampler.samples:
            _say("   nvidia-smi alone (NVML not read):")
            for gpu, values in sorted(read_smi().items()):
                _say(f"   {gpu:>3}  " + "  ".join(f"{k} {v}" for k, v in values.items()))
        else:
            _say(f"   {len(sampler.samples)} samples, one a second")
            for line in nvml_table(sampler.samples):
                _say("   " + line)

        _say("\n3. all-reduce bus bandwidth (busbw = algbw x 2(n-1)/n)")
        if procs < 2:
            _say("   one GPU here: nothing to all-reduce across (needs 2 or more)")
        else:
            try:
                result = allreduce(tmp, device, procs)
            except RuntimeError as exc:
                print(exc, file=sys.stderr)
                return 1
            backend_name = "NCCL" if gpus else "gloo"
            _say(f"   {result['world']} ranks, {backend_name}")
            _say(f"   {'bytes':>12}  {'time (us)':>10}  {'algbw GB/s':>10}  {'busbw GB/s':>10}")
            for row in result["rows"]:
                _say(
                    f"   {row['bytes']:>12,}  {row['seconds'] * 1e6:>10.1f}  "
                    f"{row['algbw'] / 1e9:>10.2f}  {row['busbw'] / 1e9:>10.2f}"
                )
    _say(f"\ndone in {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
