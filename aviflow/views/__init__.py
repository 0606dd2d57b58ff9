"""What a job looks like, wherever it is shown: the notebook panel, the JupyterLab job view,
aviflow-api's job page. :mod:`.snapshot` reads a job incrementally into a
:class:`~aviflow.views.snapshot.JobSnapshot`; :mod:`.sections` renders one as HTML; :mod:`.html`
holds the small helpers (escaping, badges, durations). Pure, apart from the reader's reads.
"""
