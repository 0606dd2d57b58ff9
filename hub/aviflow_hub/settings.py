"""The JupyterHub settings a :class:`HubConfig` stands for, built as plain data.

``hub_settings(cfg, config_path)`` returns ``{ConfigurableClass: {trait: value}}``; the real
config file (``jupyterhub_config.py`` in this package) only copies it into ``c``. Keeping
the mapping pure makes it testable with full expected dicts.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from aviflow.backends.hub import API_URL_ENV, RUNS_MOUNT_ENV
from aviflow_hub.authz import CUSTOM_SCOPES, READ_SCOPE, SUBMIT_SCOPE
from aviflow_hub.config import CULLER_NAME, SERVICE_NAME, ConfigError, HubConfig

POD_IP_ENV = "POD_IP"
# An external aviflow-api's token (api.external): the hub registers the service with it, the
# service authenticates with it (as $JUPYTERHUB_API_TOKEN). The chart keeps it in a Secret.
API_TOKEN_ENV = "AVIFLOW_API_TOKEN"
SERVICE_ACCESS = f"access:services!service={SERVICE_NAME}"
USER_SCOPES = ["self", SERVICE_ACCESS, READ_SCOPE, SUBMIT_SCOPE]
# $JUPYTERHUB_API_TOKEN of a notebook: the server role's scopes plus aviflow-api access.
SERVER_TOKEN_SCOPES = [
    "users:activity!user",
    "access:servers!server",
    SERVICE_ACCESS,
    READ_SCOPE,
    SUBMIT_SCOPE,
]
# The service reads users' groups and admin flag to authorize; nothing more.
SERVICE_SCOPES = ["list:users", "read:users", "read:groups"]
# jupyterhub-idle-culler: notebook servers only. It has no scope over aviflow-api, so it can
# never touch a training job (jobs are not hub servers).
CULLER_SCOPES = ["list:users", "read:users:activity", "read:servers", "delete:servers"]


def notebook_environment(cfg: HubConfig, runs_mount: Path | None = None) -> dict[str, str]:
    """What a spawned notebook needs to reach aviflow-api (with its $JUPYTERHUB_API_TOKEN),
    and where it mounts the run store, if it does (to load checkpoints)."""
    env = {API_URL_ENV: cfg.notebook_api_url}
    if runs_mount is not None:
        env[RUNS_MOUNT_ENV] = str(runs_mount)
    return env


def external_service_environment(cfg: HubConfig, hub_url: str, service_url: str) -> dict[str, str]:
    """What an external aviflow-api (``api.external``) needs in its environment to act as the
    hub's service: what the hub gives a service it starts itself, less the token
    (``$JUPYTERHUB_API_TOKEN``, from the same Secret as the hub's ``$AVIFLOW_API_TOKEN``).
    ``hub_url``: where the hub's API listens (the chart's hub Service); ``service_url``: where
    aviflow-api listens (it binds that address)."""
    prefix = cfg.service_prefix
    return {
        "JUPYTERHUB_SERVICE_NAME": SERVICE_NAME,
        "JUPYTERHUB_API_URL": hub_url.rstrip("/") + "/hub/api",
        "JUPYTERHUB_BASE_URL": "/",
        "JUPYTERHUB_SERVICE_PREFIX": prefix,
        "JUPYTERHUB_SERVICE_URL": service_url,
        "JUPYTERHUB_CLIENT_ID": f"service-{SERVICE_NAME}",
        "JUPYTERHUB_OAUTH_CALLBACK_URL": prefix + "oauth_callback",
    }


def roles(cfg: HubConfig) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "name": "user",
            "description": "Hub users: their notebook and their Aviflow jobs",
            "scopes": list(USER_SCOPES),
        },
        {
            "name": "aviflow-api",
            "description": "aviflow-api reads users and groups to authorize",
            "scopes": list(SERVICE_SCOPES),
            "services": [SERVICE_NAME],
        },
    ]
    if cfg.culler.enabled:
        out.append(
            {
                "name": CULLER_NAME,
                "description": "Stop idle notebook servers",
                "scopes": list(CULLER_SCOPES),
                "services": [CULLER_NAME],
            }
        )
    return out


def services(
    cfg: HubConfig,
    config_path: Path,
    python: str = sys.executable,
    api_token: str | None = None,
) -> list[dict[str, Any]]:
    """The hub's services: aviflow-api (started by the hub, or with ``api.external`` one that
    runs on its own and authenticates with ``api_token``) and the idle culler."""
    api: dict[str, Any] = {
        "name": SERVICE_NAME,
        "display": True,
        "url": cfg.api_url,
        "oauth_no_confirm": True,
        "oauth_client_allowed_scopes": [READ_SCOPE, SUBMIT_SCOPE],
    }
    if cfg.api.external:
        if not api_token:
            raise ConfigError(
                f"api.external: aviflow-api runs on its own, so the hub needs its token in "
                f"${API_TOKEN_ENV} (the chart sets it from the release's Secret)"
            )
        api["api_token"] = api_token
    else:
        api["command"] = [python, "-m", "aviflow_hub.service", "--config", str(config_path)]
    out: list[dict[str, Any]] = [api]
    if cfg.culler.enabled:
        # jupyterhub-idle-culler behind aviflow_hub.culler, which stops on the hub's SIGINT even
        # when SIGINT was inherited as ignored (see that module).
        cmd = [
            python,
            "-m",
            "aviflow_hub.culler",
            f"--timeout={cfg.culler.timeout}",
            f"--cull-every={cfg.culler.every}",
        ]
        if cfg.culler.max_age:
            cmd.append(f"--max-age={cfg.culler.max_age}")
        out.append({"name": CULLER_NAME, "command": cmd})
    return out


def authenticator(cfg: HubConfig) -> dict[str, dict[str, Any]]:
    admins = set(cfg.hub.admins)
    if cfg.auth.type == "dev":
        dev = cfg.auth.dev
        assert dev is not None
        users = admins | {u for members in cfg.hub.groups.values() for u in members}
        auth: dict[str, Any] = {"user_password": dev.user_password}
        if dev.admin_password:
            auth["admin_password"] = dev.admin_password
        return {
            "JupyterHub": {"authenticator_class": "shared-password"},
            "Authenticator": {"admin_users": admins, "allowed_users": users, "allow_all": False},
            "SharedPasswordAuthenticator": auth,
        }
    oauth = cfg.auth.generic_oauth
    assert oauth is not None
    generic: dict[str, Any] = {
        "client_id": oauth.client_id,
        "client_secret": oauth.client_secret,
        "authorize_url": oauth.authorize_url,
        "token_url": oauth.token_url,
        "userdata_url": oauth.userdata_url,
        "oauth_callback_url": oauth.callback_url,
        "scope": list(oauth.scope),
        "username_claim": oauth.username_claim,
    }
    if oauth.allowed_users:
        generic["allowed_users"] = set(oauth.allowed_users)
    if oauth.allowed_groups:
        generic["allowed_groups"] = set(oauth.allowed_groups)
    if oauth.groups_claim:
        generic.update(manage_groups=True, auth_state_groups_key=f"oauth_user.{oauth.groups_claim}")
    if oauth.admin_groups:
        generic["admin_groups"] = set(oauth.admin_groups)
    return {
        "JupyterHub": {"authenticator_class": "generic-oauth"},
        "Authenticator": {"admin_users": admins},
        "GenericOAuthenticator": generic,
    }


NOTEBOOK_UID = 1000
NOTEBOOK_SECURITY_CONTEXT: dict[str, Any] = {  # runAsUser: KubeSpawner's uid
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def spawner(
    cfg: HubConfig, data_dir: Path, python: str = sys.executable, base_dir: Path | None = None
) -> dict[str, dict[str, Any]]:
    # Local notebooks run on the service's machine: they read its run store directly.
    local = cfg.hub.spawner == "local"
    env = notebook_environment(cfg, cfg.run_root(base_dir) if local else None)
    common: dict[str, Any] = {
        "environment": env,
        "default_url": cfg.hub.default_url,
        "server_token_scopes": list(SERVER_TOKEN_SCOPES),
        "start_timeout": cfg.hub.start_timeout,
        "http_timeout": cfg.hub.http_timeout,
    }
    if cfg.hub.notebook_args:
        common["args"] = list(cfg.hub.notebook_args)
    if local:
        return {
            "JupyterHub": {"spawner_class": "aviflow_hub.spawners.LocalNotebookSpawner"},
            "Spawner": {**common, "cmd": [python, "-m", "jupyterhub.singleuser"]},
            "LocalNotebookSpawner": {"homes_root": str(data_dir / "users")},
        }
    from aviflow_hub.profiles import ProfileList

    kube: dict[str, Any] = {
        "profile_list": ProfileList(cfg),
        # Explicit, as the z2jh chart does: KubeSpawner would otherwise run the image's own
        # command and drop `args` (notebookArgs).
        "cmd": ["jupyterhub-singleuser"],
        "port": cfg.hub.notebook_port,
        "working_dir": cfg.storage.mount_path,
        "storage_pvc_ensure": True,
        "pvc_name_template": "aviflow-home-{user_server}",
        "storage_capacity": cfg.storage.capacity,
        "storage_access_modes": ["ReadWriteOnce"],
        "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "{pvc_name}"}}],
        "volume_mounts": [{"name": "home", "mountPath": cfg.storage.mount_path}],
        "extra_labels": {"app.kubernetes.io/part-of": "aviflow"},
        # Notebooks never get a Kubernetes credential (KubeSpawner's default, made explicit).
        "automount_service_account_token": False,
        # Pod Security's `restricted` profile, as the notebook images' user (uid 1000, as
        # Zero-to-JupyterHub's singleuser.uid): no privilege escalation (no sudo), no
        # capabilities, the runtime's default seccomp filter.
        "uid": NOTEBOOK_UID,
        "container_security_context": dict(NOTEBOOK_SECURITY_CONTEXT),
    }
    if cfg.hub.notebook_bind == "podIP":
        # Listen on the pod's own address only: $(POD_IP) is expanded by the kubelet in
        # $JUPYTERHUB_SERVICE_URL (built from `ip`), which jupyterhub-singleuser binds to.
        kube["ip"] = "$(POD_IP)"
        kube["environment"] = {
            **env,
            POD_IP_ENV: {"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        }
    if cfg.hub.notebook_image:
        kube["image"] = cfg.hub.notebook_image
    if cfg.storage.storage_class:
        kube["storage_class"] = cfg.storage.storage_class
    if cfg.hub.namespace:
        kube["namespace"] = cfg.hub.namespace
    return {
        "JupyterHub": {"spawner_class": "aviflow_hub.kube_spawner.AviflowKubeSpawner"},
        "Spawner": common,
        "KubeSpawner": kube,
    }


def hub_settings(
    cfg: HubConfig,
    config_path: Path,
    base_dir: Path | None = None,
    python: str = sys.executable,
    api_token: str | None = None,
) -> dict[str, dict[str, Any]]:
    """Every JupyterHub setting the config implies, as ``{class: {trait: value}}``
    (``api_token``: an external aviflow-api's, from ``$AVIFLOW_API_TOKEN``)."""
    data_dir = cfg.data_path(base_dir)
    out: dict[str, dict[str, Any]] = {
        "JupyterHub": {
            "bind_url": f"http://{cfg.hub.bind}:{cfg.hub.port}",
            "hub_port": cfg.hub.hub_port,
            "db_url": cfg.hub.db_url or f"sqlite:///{data_dir / 'jupyterhub.sqlite'}",
            "cookie_secret_file": str(data_dir / "jupyterhub_cookie_secret"),
            "pid_file": str(data_dir / "jupyterhub.pid"),
            "custom_scopes": {k: dict(v) for k, v in CUSTOM_SCOPES.items()},
            "load_roles": roles(cfg),
            "services": services(cfg, config_path, python, api_token),
            # Local: Ctrl-C or SIGTERM stops the notebooks too (`make hub`; jobs are not hub
            # servers, their detached supervisors keep running across a hub stop). Kubernetes:
            # notebooks are pods that outlive the hub's pod (an upgrade, a rollout restart),
            # and the next hub finds them again, as Zero-to-JupyterHub does.
            "cleanup_servers": cfg.hub.spawner == "local",
            # Off: JupyterHub's periodic service check only logs, and while the hub stops it
            # crashes with a traceback on a service already stopped (its server row deleted).
            # A managed service that exits is restarted by the hub's own process poll.
            "service_check_interval": 0,
        },
        "ConfigurableHTTPProxy": {"pid_file": str(data_dir / "proxy.pid")},
    }
    if cfg.hub.proxy_api_port:
        out["ConfigurableHTTPProxy"]["api_url"] = f"http://127.0.0.1:{cfg.hub.proxy_api_port}"
    if cfg.hub.proxy_url:
        # the proxy runs apart and keeps every route while the hub restarts; its token (the
        # trait's default) comes from $CONFIGPROXY_AUTH_TOKEN
        out["ConfigurableHTTPProxy"].update(api_url=cfg.hub.proxy_url, should_start=False)
        # the hub checks the proxy's routes at this interval: a new proxy pod (it starts
        # without any) has every route again within a minute (JupyterHub's default: 300 s)
        out["JupyterHub"].update(cleanup_proxy=False, last_activity_interval=60)
    if cfg.hub.hub_connect_url:
        out["JupyterHub"]["hub_connect_url"] = cfg.hub.hub_connect_url
    if cfg.hub.groups and cfg.auth.type == "dev":
        out["JupyterHub"]["load_groups"] = {
            g: {"users": list(u)} for g, u in cfg.hub.groups.items()
        }
    for part in (authenticator(cfg), spawner(cfg, data_dir, python, base_dir)):
        for cls, traits in part.items():
            out.setdefault(cls, {}).update(traits)
    return out
