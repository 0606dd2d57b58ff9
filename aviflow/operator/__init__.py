"""The TrainJob controller, ``python -m aviflow.operator``: drives each TrainJob through the
shared lifecycle on Kubernetes and Kueue (see :mod:`aviflow.operator._controller`)."""

from aviflow.operator._controller import Controller

__all__ = ["Controller"]
