"""The rank wrapper: ``python -m aviflow.runtime.rank (--script F | --exec -- ARGV)``.

It reads the job from its :class:`~aviflow.runtime.env.RuntimeEnv` and sends this rank's
stdout and stderr to the rank's log in the run store. A Python script runs in this process
(as ``python F`` would run it) so that an exception is recorded, with its traceback, as a
:class:`~aviflow.records.FailureInfo` in the run store before the rank exits non-zero.
A command is exec'd in place.

Once the script has returned (or raised), the rank ends the way a finished process must: it
joins the script's non-daemon threads, runs its ``atexit`` handlers, destroys the
``torch.distributed`` process group the script left up (after a clean finish only), lets
the script's objects be collected, flushes its output and leaves with ``os._exit`` -- without
finalizing the interpreter, as :mod:`multiprocessing`'s children do. Finalizing it is what
made finished ranks abort: a gloo worker thread (``pt_gloo_runloop``) that frees the last
work of the final backward drops the ``contextvars.Context`` that autograd stashed in the
work's ``at::ThreadLocalState``; that decref takes the GIL, and a thread that waits for the
GIL while ``Py_FinalizeEx`` starts is ended with ``pthread_exit``, whose unwinding through
the work's ``noexcept`` destructor calls ``std::terminate`` ("terminate called without an
active exception", SIGABRT). Destroying the process group does not stop those threads (a
``DistributedDataParallel`` model keeps the group alive in C++), so not finalizing is the
fix; the destroy ends the group's communicators cleanly.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import runpy
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import NoReturn

from aviflow.records import FailureInfo
from aviflow.runtime import _sampler, watchdog
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
        # no watchdog: exec would freeze its thread wherever it was (a heartbeat's temporary
        # file half written), and the command has no Python stacks to dump
        try:
            os.execvp(args[0], args)
        except OSError as exc:
            _record_failure(run, node, rank, exc, f"cannot run {args[0]!r}: {exc.strerror}\n")
            print(f"aviflow: cannot run {args[0]!r}: {exc.strerror}", file=sys.stderr)
            return 127

    dog = watchdog.start(run, node, rank)  # heartbeats and stacks
    if dog is not None:  # its beat in flight ends before the process does (no .tmp left)
        atexit.register(dog.stop)
    try:
        _sampler.start(run, node.attempt, rank)  # GPU or CPU use (aviflow.usage)
    except OSError:
        pass  # a full run store: the job runs on unsampled
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


def _exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` gives the process (as the interpreter computes it)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _join_threads() -> None:
    """Wait for the script's non-daemon threads, as the interpreter does before exiting."""
    while True:
        waiting = [
            t
            for t in threading.enumerate()
            if t is not threading.main_thread() and not t.daemon and t.is_alive()
        ]
        if not waiting:
            return
        for t in waiting:
            t.join()


def _end_process_group() -> None:
    """Destroy the default process group if the script left it initialized.

    Only where the script imported ``torch.distributed``: the wrapper never imports torch.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return
    try:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception as exc:  # the run finished; say so, but don't fail it here
        print(f"aviflow: destroy_process_group() failed at exit: {exc!r}", file=sys.stderr)


def _flush_output() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    try:  # C stdio buffers (a library's printf to a redirected stdout)
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


def finish(status: int) -> NoReturn:
    """End this rank with ``status`` without finalizing the interpreter (see the module doc).

    What a normal exit would do for the script happens first, with the interpreter intact:
    its threads are joined and its ``atexit`` handlers run; then, after a clean finish, the
    process group is destroyed; garbage is collected (the script's objects, its open files
    among them, are finalized); output is flushed.
    """
    try:
        _join_threads()
        atexit._run_exitfuncs()
        if status == 0:
            _end_process_group()
        gc.collect()
    except BaseException:  # a ^C or a failing handler must not turn into a hang or a 0
        traceback.print_exc()
        status = status or 1
    _flush_output()
    os._exit(status)


def entrypoint(argv: list[str] | None = None) -> NoReturn:
    try:
        status = main(argv)
    except SystemExit as exc:
        status = _exit_status(exc.code)
    finish(status)


if __name__ == "__main__":
    entrypoint()
