"""Pure parts of the hub: config validation, authz decisions, profiles, settings, names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kubespawner.slugs import safe_slug

from aviflow.backends.hub import RUNS_MOUNT_ENV
from aviflow.backends.local import LocalBackend, read_quotas
from aviflow.errors import BackendError
from aviflow.names import is_dns1123_label, label_value, slugify
from aviflow_hub.authz import READ_SCOPE, SUBMIT_SCOPE, JobRef, Principal, choose_queue, decide
from aviflow_hub.config import ConfigError, HubConfig
from aviflow_hub.profiles import profiles_for
from aviflow_hub.service.context import make_backend
from aviflow_hub.settings import CULLER_SCOPES, hub_settings

CFG = HubConfig.from_dict(
    {
        "teams": [
            {
                "name": "a",
                "groups": ["a"],
                "adminGroups": ["a-admins"],
                "queue": "qa",
                "gpuQuota": 8,
            },
            {"name": "b", "groups": ["b"], "queue": "qb", "gpuQuota": 2},
        ],
        "profiles": [
            {
                "slug": "small",
                "displayName": "Small",
                "cpu": "500m",
                "memory": "1Gi",
                "image": "nb:1",
                "nodeSelector": {"aviflow.dev/node-pool": "cpu"},
                "default": True,
            },
            {
                "slug": "big",
                "displayName": "Big",
                "cpu": 8,
                "memory": "32Gi",
                "image": "nb:1",
                "groups": ["a"],
            },
        ],
    }
)
ALL = frozenset({READ_SCOPE, SUBMIT_SCOPE})
ALICE = Principal("alice", frozenset({"a"}), scopes=ALL)
LEAD = Principal("lead", frozenset({"a-admins"}), scopes=ALL)
ROOT = Principal("root", frozenset(), admin=True, scopes=ALL)
READER = Principal("alice", frozenset({"a"}), scopes=frozenset({READ_SCOPE}))
JOB_A = JobRef("j-a", "alice", "a")
JOB_B = JobRef("j-b", "bob", "b")


@pytest.mark.parametrize(
    ("who", "action", "job", "status"),
    [
        (ALICE, "read", JOB_A, 200),
        (ALICE, "cancel", JOB_A, 200),
        (ALICE, "read", JOB_B, 404),
        (ALICE, "cancel", JOB_B, 404),
        (LEAD, "read", JOB_A, 200),
        (LEAD, "cancel", JOB_A, 200),
        (LEAD, "read", JOB_B, 404),
        (ROOT, "cancel", JOB_B, 200),
        (READER, "read", JOB_A, 200),
        (READER, "cancel", JOB_A, 403),
        (READER, "cancel", JOB_B, 404),
    ],
)
def test_decisions(who: Principal, action: str, job: JobRef, status: int) -> None:
    assert decide(who, action, job, CFG).status == status  # type: ignore[arg-type]


def test_queue_choice() -> None:
    assert choose_queue(ALICE, "default", CFG, 1).team.queue == "qa"  # type: ignore[union-attr]
    assert choose_queue(ALICE, "qb", CFG, 1).decision.status == 403
    assert (
        choose_queue(ALICE, "qa", CFG, 9).decision.reason
        == "the job needs 9 GPUs but queue 'qa' has a quota of 8"
    )
    assert choose_queue(ROOT, "qb", CFG, 2).team.name == "b"  # type: ignore[union-attr]
    assert choose_queue(READER, "qa", CFG, 1).decision.status == 403
    assert choose_queue(Principal("x", scopes=ALL), "default", CFG, 1).decision.status == 403


def test_unknown_keys_are_errors_with_suggestions() -> None:
    with pytest.raises(ConfigError) as err:
        HubConfig.from_dict(
            {
                "culer": {},
                "teams": [{"name": "a", "groups": [], "queu": "q"}],
                "profiles": [
                    {
                        "slug": "s",
                        "displayName": "S",
                        "cpu": 1,
                        "memory": "1Gi",
                        "image": "i",
                        "nodeselector": {},
                    }
                ],
            }
        )
    assert sorted(err.value.problems) == [
        "culer: unknown key; did you mean 'culler'?",
        "profiles.0.nodeselector: unknown key; did you mean 'nodeSelector'?",
        "teams.0.queu: unknown key; did you mean 'queue'?",
        "teams.0.queue: required key is missing",
    ]


def test_oauth_names_who_may_log_in_and_by_which_claim() -> None:
    provider = {
        "clientId": "aviflow",
        "clientSecret": "s",
        "authorizeUrl": "https://sso/a",
        "tokenUrl": "https://sso/t",
        "userdataUrl": "https://sso/u",
        "callbackUrl": "https://hub/hub/oauth_callback",
    }

    def problems(oauth: dict[str, object]) -> list[str]:
        with pytest.raises(ConfigError) as err:
            HubConfig.from_dict({"auth": {"type": "generic-oauth", "genericOAuth": oauth}})
        return err.value.problems

    assert problems({**provider, "allowedGroups": ["ml"]}) == [
        "auth.genericOAuth.usernameClaim: required key is missing"
    ]
    [open_to_all] = problems({**provider, "usernameClaim": "sub"})
    assert "name who may log in: allowedGroups or allowedUsers" in open_to_all, open_to_all
    [no_groups] = problems(
        {**provider, "usernameClaim": "sub", "allowedGroups": ["ml"], "groupsClaim": None}
    )
    assert "allowedGroups and adminGroups need groupsClaim" in no_groups, no_groups
    cfg = HubConfig.from_dict(
        {
            "auth": {
                "type": "generic-oauth",
                "genericOAuth": {**provider, "usernameClaim": "sub", "allowedUsers": ["ada"]},
            }
        }
    )
    oauth = hub_settings(cfg, Path("/etc/hub.yaml"))["GenericOAuthenticator"]
    assert (oauth["allowed_users"], oauth["username_claim"], "allow_all" in oauth) == (
        {"ada"},
        "sub",
        False,
    )


def test_profiles_by_group_golden() -> None:
    small = {
        "display_name": "Small",
        "slug": "small",
        "description": "",
        "default": True,
        "kubespawner_override": {
            "image": "nb:1",
            "cpu_guarantee": 0.5,
            "cpu_limit": 0.5,
            "mem_guarantee": 2**30,
            "mem_limit": 2**30,
            "node_selector": {"aviflow.dev/node-pool": "cpu"},
        },
    }
    assert profiles_for(CFG, {"b"}) == [small]
    assert [p["slug"] for p in profiles_for(CFG, {"a"})] == ["small", "big"]
    assert [p["slug"] for p in profiles_for(CFG, set(), admin=True)] == ["small", "big"]


def test_kubernetes_settings() -> None:
    cfg = HubConfig.from_dict(
        {
            **CFG.to_dict(),
            "hub": {"spawner": "kubernetes", "namespace": "hub"},
            "api": {"url": "http://aviflow-api:8088", "notebookUrl": "http://proxy-public"},
        }
    )
    s = hub_settings(cfg, Path("/etc/aviflow/hub.yaml"), base_dir=Path("/srv"), python="/py")
    assert s["JupyterHub"]["spawner_class"] == "aviflow_hub.kube_spawner.AviflowKubeSpawner"
    assert s["Spawner"]["environment"] == {
        "AVIFLOW_API_URL": "http://proxy-public/services/aviflow-api/"
    }
    assert s["KubeSpawner"]["volume_mounts"] == [{"name": "home", "mountPath": "/home/jovyan"}]
    assert s["KubeSpawner"]["storage_capacity"] == "10Gi" and s["KubeSpawner"]["namespace"] == "hub"
    assert (s["KubeSpawner"]["port"], s["KubeSpawner"]["working_dir"]) == (8888, "/home/jovyan")
    assert s["KubeSpawner"]["cmd"] == ["jupyterhub-singleuser"]
    assert "ip" not in s["KubeSpawner"] and "environment" not in s["KubeSpawner"]
    assert (s["Spawner"]["start_timeout"], s["Spawner"]["http_timeout"]) == (300, 120)
    # notebook pods outlive the hub's pod (an upgrade, a rollout restart): the next hub finds
    # them; the hub runs the proxy as its child unless told where it runs apart
    assert s["JupyterHub"]["cleanup_servers"] is False
    assert "should_start" not in s["ConfigurableHTTPProxy"]
    apart = HubConfig.from_dict(
        {**cfg.to_dict(), "hub": {**cfg.to_dict()["hub"], "proxyUrl": "http://proxy-api:8001"}}
    )
    a = hub_settings(apart, Path("/h.yaml"), base_dir=Path("/srv"), python="/py")
    assert a["ConfigurableHTTPProxy"] == {
        "pid_file": "/srv/.hub/proxy.pid",
        "api_url": "http://proxy-api:8001",
        "should_start": False,
    }
    assert (a["JupyterHub"]["cleanup_proxy"], a["JupyterHub"]["last_activity_interval"]) == (
        False,
        60,
    )
    pod_ip = HubConfig.from_dict(
        {
            **cfg.to_dict(),
            "hub": {
                "spawner": "kubernetes",
                "notebookBind": "podIP",
                "notebookPort": 9999,
                "notebookArgs": ["--x"],
            },
        }
    )
    k = hub_settings(pod_ip, Path("/h.yaml"), base_dir=Path("/srv"), python="/py")
    assert (k["KubeSpawner"]["ip"], k["KubeSpawner"]["port"], k["Spawner"]["args"]) == (
        "$(POD_IP)",
        9999,
        ["--x"],
    )
    assert k["KubeSpawner"]["environment"] == {
        "AVIFLOW_API_URL": "http://proxy-public/services/aviflow-api/",
        "POD_IP": {"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    }
    culler = next(r for r in s["JupyterHub"]["load_roles"] if r["name"] == "idle-culler")
    assert culler["scopes"] == CULLER_SCOPES  # notebook servers only: no aviflow scope at all
    assert not any(sc.startswith(("custom:", "access:services")) for sc in culler["scopes"])
    services = {sv["name"]: sv for sv in s["JupyterHub"]["services"]}
    assert services["aviflow-api"]["url"] == "http://aviflow-api:8088"
    assert services["idle-culler"]["command"] == [
        "/py",
        "-m",
        "aviflow_hub.culler",
        "--timeout=3600",
        "--cull-every=300",
    ]
    # A local hub's stop stops its notebooks (processes of its own); no periodic service check
    # (it crashes on a service being stopped).
    local = hub_settings(CFG, Path("/h.yaml"), base_dir=Path("/srv"), python="/py")
    assert (local["JupyterHub"]["cleanup_servers"], s["JupyterHub"]["service_check_interval"]) == (
        True,
        0,
    )


HOSTILE = [
    "Alice",
    "alice",
    "ALICE",
    "ümit",
    "umit",
    "-dash",
    "dash-",
    "--x",
    "a" * 70,
    "a" * 71,
    "a.b",
    "a_b",
    "a-b",
    "a--b",
    "a---b",
    "用户",
    "x@example.com",
    "x-example-com",
]


def test_hostile_usernames_map_to_distinct_valid_names() -> None:
    for fn, valid in (
        (slugify, is_dns1123_label),
        (
            label_value,
            lambda v: (
                len(v) <= 63 and re.fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?", v)
            ),
        ),
        (lambda n: safe_slug(n, max_length=63), is_dns1123_label),
    ):
        names = [fn(u) for u in HOSTILE]
        assert all(valid(n) for n in names), names
        assert len(set(names)) == len(HOSTILE), names


def test_the_backend_is_built_from_its_section_with_the_teams_quotas(tmp_path: Path) -> None:
    cfg = HubConfig.from_dict(
        {
            **CFG.model_dump(by_alias=True, exclude_none=True),
            "api": {
                "backend": "local",
                "runRoot": str(tmp_path / "runs"),
                "local": {"capacity": 3},
            },
        }
    )
    backend = make_backend(cfg)
    assert isinstance(backend, LocalBackend) and backend.capacity == 3
    assert backend.store.root == tmp_path / "runs"
    assert read_quotas(backend.store) == {"qa": 8, "qb": 2}
    assert (
        HubConfig.from_dict({}).api.local.capacity == 8
        and HubConfig.from_dict({}).api.ingest_every == 1.0
    )
    with pytest.raises(BackendError, match="unknown backend 'nope'"):
        make_backend(HubConfig.from_dict({"api": {"backend": "nope"}}))


def test_the_local_backends_log_cap_reaches_each_rank_as_its_share(tmp_path: Path) -> None:
    """``api.local.rankLogCap`` (one job's rank logs, all ranks together) -> the backend ->
    each node's runtime environment: the job's cap over its GPUs, at least 64Ki a rank."""
    from aviflow.spec import TrainJob

    def backend(cap: object) -> LocalBackend:
        api = {"runRoot": str(tmp_path / "runs"), "local": {"rankLogCap": cap}}
        return make_backend(HubConfig.from_dict({"api": api}))  # type: ignore[return-value]

    job = TrainJob.from_dict({"metadata": {"name": "j"}, "spec": {"nodes": 2, "gpusPerNode": 4,
                                                                   "script": "pass"}})  # fmt: skip
    capped = backend("1Mi")
    assert capped.rank_log_cap == 1 << 20
    envs = [node["env"] for node in capped.render(job)]
    assert [e["AVIFLOW_RANK_LOG_BYTES"] for e in envs] == ["131072", "131072"]  # 1Mi / 8
    assert backend(None).rank_log_cap is None
    assert "AVIFLOW_RANK_LOG_BYTES" not in backend(None).render(job)[0]["env"]
    assert HubConfig.from_dict({}).api.local.rank_log_cap == "8Gi"
    with pytest.raises(ConfigError, match=r"api\.local\.rankLogCap: '8GB' is not a number of"):
        backend("8GB")


def test_the_old_capacity_key_points_to_the_new_section() -> None:
    with pytest.raises(ConfigError) as err:
        HubConfig.from_dict({"api": {"localCapacity": 8}})
    assert err.value.problems == ["api.localCapacity: unknown key; did you mean 'local'?"]
    with pytest.raises(ConfigError) as err:
        HubConfig.from_dict({"api": {"local": {"capacity": 0, "slots": 1}}})
    assert sorted(err.value.problems) == [
        "api.local.capacity: Input should be greater than or equal to 1 (got 0)",
        "api.local.slots: unknown key; valid keys: capacity, rankLogCap, usage",
    ]


def test_local_notebooks_mount_the_services_run_store() -> None:
    cfg = HubConfig.from_dict({**CFG.to_dict(), "hub": {"dataDir": "state"}})
    s = hub_settings(cfg, Path("/etc/hub.yaml"), base_dir=Path("/srv"), python="/py")
    assert s["Spawner"]["environment"] == {
        "AVIFLOW_API_URL": "http://127.0.0.1:8088/services/aviflow-api/",
        "AVIFLOW_RUNS_MOUNT": "/srv/state/runs",
    }
    own = HubConfig.from_dict({**CFG.to_dict(), "api": {"runRoot": "/data/runs"}})
    env = hub_settings(own, Path("/etc/hub.yaml"), base_dir=Path("/srv"))["Spawner"]["environment"]
    assert env[RUNS_MOUNT_ENV] == "/data/runs"


def test_an_external_aviflow_api_is_registered_with_its_token_not_started() -> None:
    cfg = HubConfig.from_dict(
        {
            **CFG.to_dict(),
            "hub": {"spawner": "kubernetes"},
            "api": {"external": True, "url": "http://aviflow-api:8088", "backend": "kubernetes"},
        }
    )
    with pytest.raises(ConfigError) as err:
        hub_settings(cfg, Path("/etc/hub.yaml"), base_dir=Path("/srv"))
    assert err.value.problems == [
        "api.external: aviflow-api runs on its own, so the hub needs its token in "
        "$AVIFLOW_API_TOKEN (the chart sets it from the release's Secret)"
    ]
    s = hub_settings(cfg, Path("/etc/hub.yaml"), base_dir=Path("/srv"), api_token="tok")
    [api] = [sv for sv in s["JupyterHub"]["services"] if sv["name"] == "aviflow-api"]
    assert api == {
        "name": "aviflow-api",
        "display": True,
        "url": "http://aviflow-api:8088",
        "oauth_no_confirm": True,
        "oauth_client_allowed_scopes": ["custom:aviflow:read", "custom:aviflow:submit"],
        "api_token": "tok",
    }
    # notebooks never get a Kubernetes credential
    assert s["KubeSpawner"]["automount_service_account_token"] is False


def test_the_admin_sizes_aviflow_apis_lanes() -> None:
    from aviflow_hub.service.context import ServiceContext

    cfg = HubConfig.from_dict({"api": {"lanes": {"reads": 16, "writes": 2, "wait": 5}}})
    lanes = ServiceContext(cfg, None, None, None).lanes  # type: ignore[arg-type]
    try:
        sized = [(x.name, x.workers, x.per_caller, x.wait) for x in
                 (lanes.ledger, lanes.reads, lanes.writes, lanes.ingest, lanes.queues)]  # fmt: skip
        assert sized == [
            ("ledger", 8, 4, 5.0),  # the default
            ("reads", 16, 8, 5.0),
            ("writes", 2, 1, 5.0),
            ("ingest", 1, 1, 5.0),
            ("queues", 1, 1, 5.0),
        ]
    finally:
        lanes.close()
    with pytest.raises(ConfigError) as err:
        HubConfig.from_dict({"api": {"lanes": {"reads": 1, "wait": 0, "ingest": 2}}})
    said = str(err.value)
    assert "api.lanes.reads: Input should be greater than or equal to 2" in said
    assert "api.lanes.wait: Input should be greater than 0" in said
    assert "api.lanes.ingest" in said
