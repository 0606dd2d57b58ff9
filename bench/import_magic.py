"""Benchmark: what ``%load_ext aviflow`` costs a kernel, against ``import torch``.

Each sample is a fresh interpreter. The extension is timed from an IPython shell that is
already up (as in a kernel), around ``%load_ext aviflow``; the baseline is ``import torch``
in a bare interpreter. Prints medians and the ratio (target: <= 0.3x), and which heavy
modules the extension pulled in (none is the goal).

    python bench/import_magic.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

TARGET = 0.3
HEAVY = ("torch", "accelerate", "ipywidgets", "pydantic", "cloudpickle", "pandas", "aviflow.spec")

EXTENSION = f"""
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
t = time.perf_counter()
shell.run_line_magic("load_ext", "aviflow")
dt = time.perf_counter() - t
assert "aviflow_train" in shell.magics_manager.magics["cell"]
print(json.dumps({{"seconds": dt, "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""

TORCH = """
import json, time
t = time.perf_counter()
import torch
print(json.dumps({"seconds": time.perf_counter() - t, "heavy": []}))
"""


def sample(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    ext, torch, heavy = [], [], set()
    for _ in range(args.repeat):  # interleaved, so load on the machine hits both alike
        s = sample(EXTENSION)
        ext.append(s["seconds"])
        heavy.update(s["heavy"])
        torch.append(sample(TORCH)["seconds"])
    e, t = statistics.median(ext), statistics.median(torch)
    ratio = e / t
    print(
        f"%load_ext aviflow : median {e * 1000:8.1f} ms  (min {min(ext) * 1000:.1f}, n={len(ext)})"
    )
    print(
        f"import torch      : median {t * 1000:8.1f} ms  (min {min(torch) * 1000:.1f}, n={len(torch)})"
    )
    print(
        f"ratio             : {ratio:.3f}x  (target <= {TARGET}x: {'met' if ratio <= TARGET else 'NOT met'})"
    )
    print(f"heavy modules imported by the extension: {sorted(heavy) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
