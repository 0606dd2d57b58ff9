"""``%load_ext aviflow`` registers the magics and imports nothing heavy (checked in a
fresh interpreter; the time it takes is measured by ``bench/import_magic.py``)."""

from __future__ import annotations

import json
import subprocess
import sys

CODE = """
import json, sys
import aviflow
after_import = sorted(m for m in ("aviflow_magics", "ipywidgets", "torch", "IPython") if m in sys.modules)
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "aviflow")
magics = shell.magics_manager.magics
loaded = sorted(m for m in ("torch", "accelerate", "ipywidgets", "pydantic", "cloudpickle", "pandas")
                if m in sys.modules)
registered = ["aviflow_train" in magics["cell"], "aviflow_jobs" in magics["line"],
              "aviflow_attach" in magics["line"]]
shell.run_line_magic("unload_ext", "aviflow")
print(json.dumps({"after_import": after_import, "loaded": loaded, "registered": registered,
                  "hooks": len(shell.events.callbacks["pre_run_cell"])}))
"""


def test_load_ext_is_light_and_registers_the_magics() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CODE], check=True, capture_output=True, text=True, timeout=120
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {
        "after_import": [],
        "loaded": [],
        "registered": [True, True, True],
        "hooks": 0,
    }
