"""The rank wrapper: ``python -m aviflow.runtime.rank (--script F | --exec -- ARGV)``.

It reads the job from its :class:`~aviflow.runtime.env.RuntimeEnv` and sends this rank's
stdout and stderr to the rank's log in the run store. A Python script runs in this process
(as ``python F`` would run it) so that an exception is recorded, with its traceback, as a
:class:`~aviflow.records.FailureInfo` in the run store before the rank exits non-zero.
A command is exec'd in place.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import time
import traceback
from pathlib import Path

from aviflow.records import FailureInfo
from aviflow.runtime._output import redirect_output
from aviflow.runtime.env import RuntimeEnv, process_rank
from aviflow.store import RunDir


def _record_failure(run: RunDir, node: RuntimeEnv, rank: int, exc: BaseException, tb: str) -> None:
    record = FailureInfo(
        rank=rank,
        node=node.node_rank,
        attempt=node.attempt,
        time=time.time(),
        pid=os.getpid(),
        exception=type(exc).__name__,
        message=str(exc),
        traceback=tb,
    )
    try:
        run.write_failure(record)
    except OSError:
        pass


def _load_globals(run: RunDir) -> dict[str, object]:
    """Notebook variables shipped with the job (``code/vars.pkl``), if any."""
    path = run.vars_path
    if not path.is_file():
        return {}
    import cloudpickle  # only jobs that ship variables need it

    with open(path, "rb") as f:
        return dict(cloudpickle.load(f))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aviflow.runtime.rank")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--script", type=Path)
    what.add_argument("--exec", action="store_true")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args

    node = RuntimeEnv.from_env(os.environ)
    run = RunDir(node.run_dir)
    rank = process_rank()
    redirect_output(
        run.rank_log(rank), f"=== attempt {node.attempt} rank {rank} pid {os.getpid()} ===\n"
    )

    if ns.exec:
        if not args:
            parser.error("--exec needs a command")
        try:
            os.execvp(args[0], args)
        except OSError as exc:
            _record_failure(run, node, rank, exc, f"cannot run {args[0]!r}: {exc.strerror}\n")
            print(f"aviflow: cannot run {args[0]!r}: {exc.strerror}", file=sys.stderr)
            return 127

    script = str(ns.script)
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).parent))
    try:
        init = _load_globals(run)
        runpy.run_path(script, init_globals=init, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            _record_failure(run, node, rank, exc, f"SystemExit({exc.code!r})\n")
        raise
    except BaseException as exc:
        tb = traceback.format_exc()
        _record_failure(run, node, rank, exc, tb)
        sys.stderr.write(tb)
        sys.stderr.flush()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
