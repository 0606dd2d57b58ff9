"""Notebook profiles: configured profiles -> KubeSpawner ``profile_list`` entries, per group.

>>> cfg = HubConfig.from_dict({"hub": {"groups": {"vision": [], "nlp": []}}, "profiles": [{"slug": "small",
...     "displayName": "Small", "cpu": 2, "memory": "8Gi", "image": "aviflow/notebook:1",
...     "groups": ["vision"]}]})
>>> [p["slug"] for p in profiles_for(cfg, {"vision"})], profiles_for(cfg, {"nlp"})
(['small'], [])
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aviflow._units import parse_quantity
from aviflow_hub.config import HubConfig, Profile


def profile_entry(profile: Profile) -> dict[str, Any]:
    """One KubeSpawner ``profile_list`` entry (guarantee = limit, so notebooks are Guaranteed QoS).

    Memory is given in bytes: KubeSpawner's memory traits read ``8G`` as 8 GiB and refuse
    Kubernetes suffixes such as ``8Gi``.
    """
    override: dict[str, Any] = {
        "cpu_guarantee": _cores(profile.cpu),
        "cpu_limit": _cores(profile.cpu),
        "mem_guarantee": _bytes(profile.memory),
        "mem_limit": _bytes(profile.memory),
    }
    if profile.image:  # else KubeSpawner's image: hub.notebookImage
        override["image"] = profile.image
    if profile.node_selector:
        override["node_selector"] = dict(profile.node_selector)
    if profile.tolerations:
        override["tolerations"] = [dict(t) for t in profile.tolerations]
    entry: dict[str, Any] = {
        "display_name": profile.display_name,
        "slug": profile.slug,
        "description": profile.description,
        "kubespawner_override": override,
    }
    if profile.default:
        entry["default"] = True
    return entry


def profiles_for(
    cfg: HubConfig, groups: Iterable[str], admin: bool = False
) -> list[dict[str, Any]]:
    """The profiles a user in ``groups`` may choose (hub admins may choose every profile)."""
    mine = set(groups)
    return [profile_entry(p) for p in cfg.profiles if admin or not p.groups or mine & set(p.groups)]


def _cores(value: str | int) -> float:
    return float(parse_quantity(value))


def _bytes(value: str) -> int:
    return round(parse_quantity(value))


class ProfileList:
    """A KubeSpawner ``profile_list`` callable: the spawning user's profiles only."""

    def __init__(self, cfg: HubConfig) -> None:
        self.cfg = cfg

    def __call__(self, spawner: Any) -> list[dict[str, Any]]:
        user = spawner.user
        return profiles_for(self.cfg, [g.name for g in user.groups], admin=bool(user.admin))
