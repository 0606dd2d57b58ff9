"""The LLM recipe's tiny sizes (:mod:`aviflow.examples.llm`'s ``LLM_*`` variables), one set
for every backend its tests run it on: ``tests/core/test_llm.py`` (the local backend) and
``tests/k8s/test_llm_pool.py`` (a TrainJob on the test control plane) train the same tiny
model for seconds on 2 cores, and their exact expectations (steps, samples, tokens) follow
from these numbers.

>>> TINY["LLM_GLOBAL_BATCH"] == str(G), TINY["LLM_SEQ"] == str(SEQ), STEPS
(True, True, 8)
"""

from __future__ import annotations

G = 16  # samples per optimizer step
SEQ = 16  # tokens per sample
STEPS = 8
TINY = {
    "LLM_STEPS": str(STEPS),
    "LLM_SEQ": str(SEQ),
    "LLM_MICRO_BATCH": "2",
    "LLM_GLOBAL_BATCH": str(G),
    "LLM_EVAL_SAMPLES": "8",
    "LLM_EVAL_EVERY": "4",
    "LLM_CKPT_EVERY": "4",
    "LLM_HIDDEN": "32",
    "LLM_HEADS": "2",
    "LLM_LR": "1e-2",
}
