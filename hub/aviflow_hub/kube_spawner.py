"""KubeSpawner as Aviflow configures it: a refused choice is the user's error, not the hub's.

KubeSpawner validates ``user_options`` (the chosen profile and its options) inside ``start``
and raises ``ValueError``, which JupyterHub answers with a 500 and a generic "failed to
start". Here the same check answers **400** with KubeSpawner's own message, which names the
profiles the user may choose (:class:`aviflow_hub.profiles.ProfileList` lists only those
of the user's groups, so another team's profile is "no such profile" and its existence is
not revealed). The check runs before anything is created: no PVC, no pod.
"""

from __future__ import annotations

from kubespawner import KubeSpawner
from tornado import web

# What KubeSpawner does in the hub's namespace (the chart's hub Role): notebook pods, their
# home claims, and the events it shows while a notebook starts. No Services, no Secrets
# (internal SSL is off), nothing cluster-wide.
HUB_RULES: list[dict[str, list[str]]] = [
    {
        "apiGroups": [""],
        "resources": ["pods", "persistentvolumeclaims"],
        "verbs": ["get", "list", "watch", "create", "delete"],
    },
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
]


class AviflowKubeSpawner(KubeSpawner):
    """``KubeSpawner`` whose refused ``user_options`` are a 400 with the reason."""

    async def load_user_options(self) -> None:
        try:
            await super().load_user_options()
        except ValueError as e:
            raise web.HTTPError(400, "%s", e) from e
