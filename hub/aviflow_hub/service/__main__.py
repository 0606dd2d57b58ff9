"""``python -m aviflow_hub.service --config FILE``."""

import signal

# JupyterHub stops its services with SIGINT (SIGTERM only 30 s later). A process started with
# SIGINT ignored (inherited from a hub run as ``cmd &`` by a non-interactive shell) would ignore
# it while the modules below load: end at once instead. serve() then handles both signals.
signal.signal(signal.SIGINT, signal.SIG_DFL)
signal.signal(signal.SIGTERM, signal.SIG_DFL)

from aviflow_hub.service.app import main  # noqa: E402

main()
