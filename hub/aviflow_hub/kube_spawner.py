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


class AviflowKubeSpawner(KubeSpawner):
    """``KubeSpawner`` whose refused ``user_options`` are a 400 with the reason."""

    async def load_user_options(self) -> None:
        try:
            await super().load_user_options()
        except ValueError as e:
            raise web.HTTPError(400, "%s", e) from e
