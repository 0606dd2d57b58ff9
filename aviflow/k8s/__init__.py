"""Aviflow on Kubernetes: the TrainJob custom resource and the pure builders of the objects a
job needs on the cluster (no API calls here)."""
