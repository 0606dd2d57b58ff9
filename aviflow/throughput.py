"""Throughput from a job's own counters: tokens/s, step time and MFU, derived where the
metric rows are written (the main process's :func:`aviflow.log`), so they reach the run
store, and every view, as ordinary metrics.

A job that logs a cumulative ``tokens`` counter (all ranks' tokens since the run began, as
:mod:`aviflow.examples.llm` does) gets, on each row that advances the step:

- ``tokens_per_s``: tokens since the previous such row over the seconds between them (the
  whole job's rate; per rank it is that over the world size);
- ``step_time``: those seconds over the steps between them (unless the job logs its own);
- ``mfu``: model FLOPs utilization, ``tokens_per_s x flops_per_token / (peak x devices)``,
  when the job said its training FLOPs per token (``flops_per_token`` in
  ``init_trackers(config=...)`` or in a logged row) and the device's peak is known: NVIDIA
  GPUs by name (:data:`PEAK_FLOPS`, dense bf16 tensor-core peaks). A CPU has no peak here,
  so on CPU there is no ``mfu``.

>>> rates = Rates()
>>> rates.update(step=1, time=100.0, tokens=1000)
{}
>>> rates.update(step=3, time=101.0, tokens=5000)
{'tokens_per_s': 4000.0, 'step_time': 0.5}
>>> mfu(tokens_per_s=4000.0, flops_per_token=6e9, peak=989e12, devices=8)
0.003033
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Dense bf16 tensor-core peak FLOP/s per device, from the vendors' datasheets; the longest
# name that the device's name contains wins ("H100 PCIe" before "H100").
PEAK_FLOPS: dict[str, float] = {
    "B200": 2250e12,
    "GB200": 2500e12,
    "H200": 989e12,
    "GH200": 989e12,
    "H100 PCIe": 756e12,
    "H100 NVL": 835e12,
    "H100": 989e12,
    "H800": 989e12,
    "A100": 312e12,
    "A800": 312e12,
    "L40S": 362e12,
    "L40": 181e12,
    "L4": 121e12,
    "A10G": 70e12,
    "A10": 125e12,
    "V100": 125e12,  # fp16: the V100 has no bf16
}


def peak_flops(device_name: str | None) -> float | None:
    """The peak of a device called ``device_name`` (e.g. ``"NVIDIA H100 80GB HBM3"``), or
    None when it is not a known GPU (every CPU)."""
    if not device_name:
        return None
    name = device_name.upper()
    for key in sorted(PEAK_FLOPS, key=len, reverse=True):
        if key.upper() in name:
            return PEAK_FLOPS[key]
    return None


def mfu(tokens_per_s: float, flops_per_token: float, peak: float, devices: int) -> float | None:
    """The fraction of the devices' peak the model's training FLOPs reach (6 digits)."""
    if peak <= 0 or devices <= 0 or flops_per_token <= 0 or tokens_per_s < 0:
        return None
    value = tokens_per_s * flops_per_token / (peak * devices)
    return round(value, 6) if math.isfinite(value) else None


@dataclass
class Rates:
    """The previous row that advanced the step, to rate the next one against."""

    step: int | None = None
    time: float = 0.0
    tokens: float = 0.0

    def update(self, step: int, time: float, tokens: float) -> dict[str, float]:
        """The rates of the row at ``step`` (none for the first, or after a step went back:
        a restarted attempt re-logs from its checkpoint)."""
        out: dict[str, float] = {}
        if self.step is not None and step > self.step and time > self.time:
            seconds = time - self.time
            if tokens >= self.tokens:
                out["tokens_per_s"] = round((tokens - self.tokens) / seconds, 3)
            out["step_time"] = round(seconds / (step - self.step), 6)
        if self.step is None or step != self.step:
            self.step, self.time, self.tokens = step, time, tokens
        return out
