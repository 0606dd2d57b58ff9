"""``python -m aviflow_hub.service --config FILE``."""

from aviflow_hub.service.app import main

main()
