"""Aviflow JupyterHub configuration and the aviflow-api service (see issue 5)."""
