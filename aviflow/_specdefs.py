"""Facts of the TrainJob spec that light modules need without importing pydantic.

:mod:`aviflow.spec` builds its model from these, and the notebook magic builds its option
choices from them, so the two cannot drift (``%load_ext aviflow`` must stay cheap).
"""

from __future__ import annotations

from typing import Literal, get_args

GPUS_PER_HGX_NODE = 8
MAX_NODES = 512
MixedPrecision = Literal["no", "fp16", "bf16", "fp8"]
MIXED_PRECISION: tuple[str, ...] = get_args(MixedPrecision)
# ``spec.accelerate.strategy``: how the model is spread over the ranks (a preset of
# ``accelerate launch`` arguments, :func:`aviflow.runtime.launch.accelerate_argv`).
Strategy = Literal["ddp", "fsdp"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)
# ``spec.accelerate.fsdp.sharding``: full = parameters resharded after the forward pass
# (ZeRO-3-like); grad-op = kept whole until the backward pass (ZeRO-2-like, more memory, less
# communication).
FsdpSharding = Literal["full", "grad-op"]
FSDP_SHARDING: tuple[str, ...] = get_args(FsdpSharding)
