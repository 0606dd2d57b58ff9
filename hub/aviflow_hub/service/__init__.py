"""aviflow-api: the JupyterHub service that submits, lists and accounts Aviflow jobs."""
