"""The magics: ``%%aviflow_train``, ``%aviflow_jobs`` and ``%aviflow_attach``.

Loading this module imports IPython's magic machinery only; the core package, pydantic,
cloudpickle and ipywidgets are imported when a magic first runs, torch never.
"""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from aviflow_magics._options import OptionError, help_text, parse_train_options

if TYPE_CHECKING:
    from aviflow_magics._job import NotebookJob


def _one_line(exc: BaseException) -> str:
    problems = getattr(exc, "problems", None)
    if problems:
        return "; ".join(str(p) for p in problems)
    return " ".join(str(exc).split()) or type(exc).__name__


@magics_class
class AviflowMagics(Magics):
    """Aviflow's notebook magics; ``%load_ext aviflow`` registers them."""

    def __init__(self, shell: Any = None) -> None:
        super().__init__(shell)
        self.cell_id: str | None = None

    def pre_run_cell(self, info: Any) -> None:
        """Remember which cell is running (JupyterLab sends its id with each execution)."""
        self.cell_id = getattr(info, "cell_id", None)

    # -- %%aviflow_train ---------------------------------------------------------------------------
    @cell_magic("aviflow_train")
    def aviflow_train(self, line: str, cell: str) -> NotebookJob | Any:
        try:
            return self._train(line, cell)
        except OptionError as exc:
            raise UsageError(f"{exc}; nothing was submitted") from None

    aviflow_train.__doc__ = help_text()

    def _train(self, line: str, cell: str) -> Any:
        from aviflow.errors import AviflowError

        options = parse_train_options(line)
        from aviflow_magics import _build

        _build.check_syntax(cell)
        try:
            return self._prepare_and_submit(options, cell)
        except AviflowError as exc:
            raise OptionError(f"{type(exc).__name__}: {_one_line(exc)}") from None

    def _prepare_and_submit(self, options: Any, cell: str) -> Any:
        from pathlib import Path

        from aviflow import api
        from aviflow.backends import get_backend
        from aviflow.bundle import build_bundle
        from aviflow.store import VARS_FILE
        from aviflow_magics import _build, _origin, _resume, _vars
        from aviflow_magics._job import NotebookJob
        from aviflow_magics._versions import version_warning

        ns = self.shell.user_ns if self.shell is not None else {}
        base = None
        if options.spec is not None:
            from aviflow.spec import TrainJob

            path = Path(options.spec).expanduser()
            if not path.is_file():
                raise OptionError(f"--spec: {options.spec} does not exist or is not a file")
            base = TrainJob.load(path).to_dict()
        origin = _origin.make_origin(
            cell, ns, self.cell_id, getattr(self.shell, "execution_count", None)
        )
        name = _origin.default_name(origin["notebook"]) or _build.DEFAULT_NAME
        job = _build.build_job(options, cell, base=base, default_name=name)
        extra: dict[str, bytes] = {}
        if options.vars:
            extra[VARS_FILE] = _vars.pickle_vars(options.vars, ns)
        backend = get_backend(options.backend)
        start = _resume.find_resume_checkpoint(backend, options.resume, job.metadata.name, origin)
        if start is not None:
            job = job.with_changes(resumeFrom={"job": start.job_id, "step": start.step})
        mismatch = version_warning(backend, job)
        if options.dry_run:
            from aviflow_magics._dryrun import dry_run

            bundle = build_bundle(job, extra_files=extra, origin=origin)
            notes = []
            if options.resume == "auto" and start is None:
                notes.append(
                    "--resume auto: no previous checkpoint of this cell or name; starts fresh"
                )
            if mismatch:
                notes.append(mismatch)
            return dry_run(job, backend, bundle.files, notes=notes, origin=origin)
        if mismatch:
            print(mismatch)
        submitted = api.submit(job, backend=backend, extra_files=extra, origin=origin)
        handle = NotebookJob(submitted.id, submitted.backend)
        if options.out:
            ns[options.out] = handle
        if not options.wait:
            return handle
        from IPython.display import display

        display(handle)
        try:
            state = handle.wait()
        except KeyboardInterrupt:
            print(f"stopped waiting; job {handle.id} goes on (%aviflow_attach {handle.id})")
            return None
        print(f"job {handle.id} {state.value}")
        return None

    # -- %aviflow_jobs -----------------------------------------------------------------------------
    @line_magic("aviflow_jobs")
    def aviflow_jobs(self, line: str = "") -> Any:
        """Show a table of your jobs, newest first.

        Usage: %aviflow_jobs [--backend NAME] [--limit N]

          --backend NAME   registered backend (default: $AVIFLOW_BACKEND or local)
          --limit N        show the newest N jobs (default 20)

        Example: %aviflow_jobs --limit 5
        """
        ns = self._parse_small(
            line, [("--backend", str, None), ("--limit", int, 20)], "%aviflow_jobs"
        )
        from aviflow.errors import AviflowError
        from aviflow_magics._table import jobs_table

        try:
            from aviflow.backends import get_backend

            return jobs_table(get_backend(ns.backend), limit=ns.limit)
        except AviflowError as exc:
            raise UsageError(_one_line(exc)) from None

    # -- %aviflow_attach ---------------------------------------------------------------------------
    @line_magic("aviflow_attach")
    def aviflow_attach(self, line: str = "") -> Any:
        """Re-attach a live panel to a job by id (also after a kernel restart).

        Usage: %aviflow_attach JOB_ID [--backend NAME] [--out NAME]

        Metrics, logs and checkpoints are replayed from the run store.
        Example: %aviflow_attach tiny-3f9a1c2b --out job
        """
        ns = self._parse_small(
            line,
            [("--backend", str, None), ("--out", str, None)],
            "%aviflow_attach",
            positional="job_id",
        )
        from aviflow import api
        from aviflow.errors import AviflowError
        from aviflow_magics._job import NotebookJob

        try:
            found = api.get(ns.job_id, ns.backend)
        except AviflowError as exc:
            raise UsageError(_one_line(exc)) from None
        handle = NotebookJob(found.id, found.backend)
        if ns.out:
            if not ns.out.isidentifier():
                raise UsageError(f"--out: {ns.out!r} is not a variable name")
            self.shell.user_ns[ns.out] = handle
        return handle

    @staticmethod
    def _parse_small(
        line: str, options: list[tuple[str, type, Any]], prog: str, positional: str | None = None
    ) -> argparse.Namespace:
        from aviflow_magics._options import _Parser

        parser = _Parser(prog=prog, add_help=False, allow_abbrev=False, exit_on_error=False)
        if positional:
            parser.add_argument(positional)
        for flag, kind, default in options:
            parser.add_argument(flag, type=kind, default=default)
        try:
            return parser.parse_args(shlex.split(line))
        except (OptionError, argparse.ArgumentError, ValueError) as exc:
            raise UsageError(f"{prog}: {exc}") from None
