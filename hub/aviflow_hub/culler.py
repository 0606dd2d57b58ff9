"""``python -m aviflow_hub.culler [jupyterhub-idle-culler options]``: the idle culler as a
managed hub service that stops at once on SIGINT or SIGTERM.

JupyterHub stops a managed service with SIGINT and sends SIGTERM only ``interrupt_timeout``
(30 s, not configurable for services) later, while the hub's shutdown waits. The culler
relies on Python's default SIGINT handler (``KeyboardInterrupt``), which Python does not
install when the process starts with SIGINT ignored: services inherit that from a hub started
as ``cmd &`` by a non-interactive shell or by launchers that ignore SIGINT, and the hub then
took ~30 s to stop on SIGTERM. Here both signals stop the culler's event loop explicitly.
"""

from __future__ import annotations

import asyncio
import signal
import sys

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOP_GRACE = 5.0  # seconds for a cull in flight to finish its cancellation


def main(argv: list[str] | None = None) -> int:
    from jupyterhub_idle_culler import IdleCuller

    # IdleCuller.start() runs tornado's IOLoop.current(), i.e. this thread's asyncio loop.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)

    def stop(sig: signal.Signals) -> None:
        IdleCuller.instance().log.info("idle-culler stopping on %s", sig.name)
        loop.stop()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop, sig)
    try:
        IdleCuller.launch_instance(argv)
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.wait(pending, timeout=STOP_GRACE))
        loop.close()
    return 0


if __name__ == "__main__":
    # A signal while jupyterhub_idle_culler loads: end at once (nothing to clean up yet), even
    # when SIGINT was inherited as ignored. The event loop's handlers take over in main().
    for _sig in STOP_SIGNALS:
        signal.signal(_sig, signal.SIG_DFL)
    sys.exit(main())
