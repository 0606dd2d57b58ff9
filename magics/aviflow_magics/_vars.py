"""Ship named notebook variables with a job (``--vars``): cloudpickled into the bundle's
``vars.pkl`` (:data:`aviflow.store.VARS_FILE`).

The rank wrapper loads that file as the script's globals, so ``--vars data,config``
makes ``data`` and ``config`` plain globals of the training script on every rank.
A value that cannot be pickled is refused before anything is submitted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aviflow_magics._options import OptionError

MAX_VARS_BYTES = 16 << 20


def pickle_vars(names: Sequence[str], namespace: Mapping[str, Any]) -> bytes:
    """cloudpickle ``{name: namespace[name]}``; OptionError naming the first bad variable."""
    import cloudpickle

    picked: dict[str, Any] = {}
    for name in names:
        if name not in namespace:
            raise OptionError(f"--vars: {name!r} is not defined in this notebook")
        value = namespace[name]
        try:
            cloudpickle.dumps(value)
        except Exception as exc:  # pickling can fail with any exception type
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise OptionError(
                f"--vars: cannot ship {name!r} ({type(value).__name__}): {reason}"
            ) from None
        picked[name] = value
    data = cloudpickle.dumps(picked)
    if len(data) > MAX_VARS_BYTES:
        raise OptionError(
            f"--vars: the variables pickle to {len(data)} bytes; at most {MAX_VARS_BYTES} can be "
            "shipped (save large data to shared storage and ship its path)"
        )
    return data
