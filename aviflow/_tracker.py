"""The accelerate tracker behind :func:`aviflow.tracker` (imports accelerate)."""

from __future__ import annotations

from typing import Any

from accelerate.tracking import GeneralTracker, on_main_process

from aviflow import tracking


class AviflowTracker(GeneralTracker):  # type: ignore[misc]  # accelerate is untyped
    """Writes ``accelerator.log(values, step)`` to the job's ``metrics.jsonl``."""

    name = "aviflow"
    requires_logging_directory = False
    main_process_only = True

    def __init__(self) -> None:
        super().__init__()
        self._config: dict[str, Any] = {}

    @property
    def tracker(self) -> AviflowTracker:
        return self

    @on_main_process  # type: ignore[untyped-decorator]
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self._config = dict(values)
        tracking.set_flops_per_token(values.get("flops_per_token"))  # for the MFU

    @on_main_process  # type: ignore[untyped-decorator]
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        numeric = {k: v for k, v in values.items() if not isinstance(v, dict | list)}
        if numeric:
            tracking.log(numeric, step=step if step is not None else 0)

    @on_main_process  # type: ignore[untyped-decorator]
    def finish(self) -> None:
        tracking.flush()  # rows held while the run store was full, if it takes them now
