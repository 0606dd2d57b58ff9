"""The in-job runtime: what each node (locally a process group, on Kubernetes a pod) runs.

``python -m aviflow.runtime`` reads its node rank from ``JOB_COMPLETION_INDEX`` (Indexed
Job) or ``AVIFLOW_NODE_RANK``, then runs ``accelerate launch`` for that node; every rank
runs through :mod:`aviflow.runtime.rank`, which writes per-rank logs and failure records.
While the ranks run, the node's launcher holds their logs within their share of the job's
log cap (:mod:`aviflow.runtime._logcap`).
"""
