"""Spawners for the local hub: notebooks as processes of the hub's user, one home per user.

Each user's home (their storage) is ``<homes_root>/<slug>``, where the slug is the
injective DNS-1123 form of the username (:func:`aviflow.names.slugify`), so hostile or
colliding usernames never share or escape a directory.

The notebooks run as the hub's own user. When that is root (a container, a dev VM), Jupyter
Server refuses to start ("Running as root is not recommended") and exits, so the spawner then
passes ``--allow-root``.
"""

from __future__ import annotations

import os

from jupyterhub.spawner import SimpleLocalProcessSpawner
from traitlets import Unicode, default

from aviflow.names import slugify


class LocalNotebookSpawner(SimpleLocalProcessSpawner):
    """``SimpleLocalProcessSpawner`` with a per-user home under ``homes_root``."""

    homes_root = Unicode(
        "/tmp/aviflow-homes",
        help="Directory holding one home directory per user (named by the username's slug).",
    ).tag(config=True)

    @default("home_dir")
    def _default_home_dir(self) -> str:
        return f"{self.homes_root}/{slugify(self.user.name)}"

    def get_args(self) -> list[str]:
        args = list(super().get_args())
        if os.geteuid() == 0 and "--allow-root" not in args:
            args.append("--allow-root")
        return args
