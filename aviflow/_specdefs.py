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
