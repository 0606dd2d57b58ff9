"""Values the chart refuses, each by name with what to do: a typo, a bad quota or profile,
a login without its parts (`helm template` of the chart; no cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import EXAMPLES, Render

MULTI_TEAM = EXAMPLES / "multi-team.yaml"


# the example's identity provider, allowing nobody yet
OAUTH = yaml.safe_load(MULTI_TEAM.read_text())["auth"]["genericOAuth"] | {"allowedGroups": []}
BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        "typo",
        {"teams": [{"name": "a", "groups": ["a"], "queue": "a", "gpuQuotta": 4}]},
        "at '/teams/0': additional properties 'gpuQuotta' not allowed",
    ),
    (
        "negative quota",
        {"teams": [{"name": "a", "groups": ["a"], "queue": "a", "gpuQuota": -1}]},
        "at '/teams/0/gpuQuota': minimum: got -1, want 0",
    ),
    (
        "team without a queue",
        {"teams": [{"name": "a", "groups": ["a"]}]},
        "at '/teams/0': missing property 'queue'",
    ),
    (
        "profile for an unknown group",
        {
            "profiles": [
                {
                    "slug": "p",
                    "displayName": "P",
                    "cpu": 1,
                    "memory": "1Gi",
                    "image": "nb:1",
                    "groups": ["nobody"],
                }
            ]
        },
        "profiles[p]: group nobody is in no team and no hub.groups entry",
    ),
    (
        "borrowing without a cohort",
        {"teams": [{"name": "a", "groups": ["a"], "queue": "a", "borrowingLimit": 2}]},
        "teams[a]: borrowingLimit and lendingLimit need a cohort",
    ),
    (
        "a key the chart owns",
        {"hub": {"spawner": "local"}},
        "at '/hub': additional properties 'spawner' not allowed",
    ),
    (
        "a bad trainer image name",
        {"api": {"kubernetes": {"images": [{"image": "x:1"}]}}},
        "at '/api/kubernetes/images/0': missing property 'name'",
    ),
    (
        "a log cap that is not bytes",
        {"api": {"kubernetes": {"rankLogCap": "8GB"}}},
        "at '/api/kubernetes/rankLogCap'",
    ),
    (
        "the dev login on a load balancer",
        {"auth": {"dev": {"allowOnPublicAddress": False}}},
        "auth.type dev on a public address (proxy.type LoadBalancer): anyone who knows its one "
        "password may log in as any user. Use auth.type generic-oauth, or proxy.type ClusterIP "
        "(kubectl port-forward), or set auth.dev.allowOnPublicAddress: true for a trial",
    ),
    (
        "the dev login at an ingress",
        {
            "auth": {"dev": {"allowOnPublicAddress": False}},
            "proxy": {"type": "ClusterIP"},
            "ingress": {"enabled": True},
        },
        "auth.type dev on a public address (proxy.type ClusterIP, ingress.enabled)",
    ),
    (
        "https without a certificate",
        {"proxy": {"https": {"enabled": True}}},
        "proxy.https.enabled needs proxy.https.secret: a kubernetes.io/tls Secret (tls.crt, "
        "tls.key) in the release's namespace",
    ),
    (
        "oauth open to every account",
        {"auth": {"type": "generic-oauth", "genericOAuth": {**OAUTH, "adminGroups": []}}},
        "auth.genericOAuth: name who may log in with allowedGroups or allowedUsers (every "
        "account of the identity provider is not allowed)",
    ),
    (
        "oauth without a stable identity claim",
        {
            "auth": {
                "type": "generic-oauth",
                "genericOAuth": {k: v for k, v in OAUTH.items() if k != "usernameClaim"},
            }
        },
        "at '/auth/genericOAuth': missing property 'usernameClaim'",
    ),
]


@pytest.mark.parametrize(("values", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_values_are_refused_by_name(
    render: Render, values: dict[str, Any], message: str
) -> None:
    proc = render(values=values, check=False)
    assert proc.returncode != 0, proc.stdout[:500]
    assert message in proc.stderr, proc.stderr


def test_the_chart_has_no_default_password(render: Render, tmp_path: Path) -> None:
    defaults = tmp_path / "defaults.yaml"
    defaults.write_text("{}\n")
    proc = render(defaults, check=False)
    assert proc.returncode != 0, proc.stdout[:500]
    assert (
        "auth.dev.userPassword: the dev login has no default password; set one (8 characters "
        "or more), or use auth.type generic-oauth with auth.genericOAuth" in proc.stderr
    ), proc.stderr
