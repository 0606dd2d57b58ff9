"""The rank sampler against the real ``nvidia-ml-py`` (in the lock's ``train`` extra): where
the NVML library loads (a GPU node's driver), the sample is the GPU's; where it does not (these
CPU machines), ``nvmlInit`` raises the package's own error and the rank samples its CPU use
and RSS instead. The reader's arithmetic on a GPU is in test_usage.py's ``FakeNvml``."""

from __future__ import annotations

import ctypes.util
import json
import os

import pynvml

from aviflow.runtime._sampler import Sampler, nvml_reader
from aviflow.store import RunDir
from aviflow.usage import parse_sample


def _nvml_loads() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return False
    pynvml.nvmlShutdown()
    return True


def test_the_real_package_is_the_one_imported() -> None:
    # the module the sampler imports is the package's, with the calls the reader makes
    assert os.path.basename(os.path.dirname(pynvml.__file__)) == "site-packages"
    for call in ("nvmlInit", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
                 "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo",
                 "nvmlDeviceGetPowerUsage"):  # fmt: skip
        assert callable(getattr(pynvml, call)), call


def test_the_sampler_reads_the_gpu_where_nvml_loads_else_the_cpu(tmp_path) -> None:
    loads = _nvml_loads()
    if ctypes.util.find_library("nvidia-ml") is None:  # no driver on this machine
        assert not loads
    run = RunDir(tmp_path / "job")
    env = {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    sampler = Sampler(run, 1, 0, env, every=0.05)
    assert (sampler.gpu is not None) is loads
    record = {**sampler.sample(0.0, 0.0), "time": 1.0}
    sample = parse_sample(json.loads(json.dumps(record)), 0)
    assert sample is not None
    assert sample.kind == ("gpu" if loads else "cpu")
    assert 0.0 <= sample.util <= 100.0
    if not loads:
        assert nvml_reader(0) is None
        assert record["cores"] >= 1 and record["mem"] > 0 and record["mem_total"] >= record["mem"]
