"""The job panel's widgets: one concern per module, each a thin view over built-in
ipywidgets (no frontend build), fed :class:`~aviflow.views.snapshot.JobSnapshot`\\ s.

``header`` (name, id, status badge, elapsed, GPU-hours, queue position), ``failure`` (first
failing rank and traceback), ``ranks`` (per-node/per-rank state), ``chart`` (metrics vs
step, SVG), ``logs`` (rank selector + tail), ``checkpoints`` (list + load snippet),
``cancel`` (button with confirmation), and ``panel`` which lays them out.
"""
