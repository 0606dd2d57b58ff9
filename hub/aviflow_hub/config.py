"""The hub's one configuration source: a strict YAML document (the Helm chart mounts it).

Every section is validated before JupyterHub or the service reads it: an unknown key is an
error that names the key and suggests the closest valid one, and wrong types are refused.

>>> cfg = HubConfig.from_dict({"teams": [{"name": "vision", "groups": ["vision"], "queue": "vision"}]})
>>> cfg.team_named("vision").queue
'vision'

The ``api`` section (aviflow-api and its job backend, whose own section is of the model the
backend's class declares) is :mod:`aviflow_hub.api_section`. ``load_config(path)`` reads a
file; without a path it reads ``$AVIFLOW_HUB_CONFIG``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from aviflow._model import StrictModel, explain, storable_problems
from aviflow._units import parse_quantity
from aviflow.errors import AviflowError
from aviflow.names import DNS1123_LABEL, is_dns1123_label
from aviflow_hub.api_section import ApiSection

CONFIG_ENV = "AVIFLOW_HUB_CONFIG"
SERVICE_NAME = "aviflow-api"
CULLER_NAME = "idle-culler"


class ConfigError(AviflowError, ValueError):
    """The hub configuration is invalid; ``problems`` has one line per problem."""

    def __init__(self, problems: list[str] | str, source: str = "hub config") -> None:
        self._problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__(f"invalid {source}:\n" + "\n".join(f"  - {p}" for p in self._problems))

    @property
    def problems(self) -> list[str]:
        return list(self._problems)


def _quantity(v: str | int | None, what: str) -> str | int | None:
    if v is None:
        return v
    try:
        if parse_quantity(v) <= 0:
            raise ValueError
    except ValueError:
        raise ValueError(
            f"{v!r} is not a positive {what} quantity, e.g. '2', '500m', '8Gi'"
        ) from None
    return v


class HubSection(StrictModel):
    bind: str = Field("127.0.0.1", description="Address the proxy listens on.")
    port: int = Field(8000, ge=1, le=65535, description="Public port of the proxy.")
    hub_port: int = Field(8081, alias="hubPort", ge=1, le=65535)
    proxy_api_port: int | None = Field(None, alias="proxyApiPort", ge=1, le=65535)
    proxy_url: str | None = Field(
        None,
        alias="proxyUrl",
        description="The API of a configurable-http-proxy that runs apart (its own "
        "Deployment): the hub neither starts nor stops it, and takes its token from "
        "$CONFIGPROXY_AUTH_TOKEN. Unset: the hub runs the proxy as its child.",
    )
    hub_connect_url: str | None = Field(
        None, alias="hubConnectUrl", description="URL notebooks use to reach the hub API."
    )
    data_dir: str = Field(
        ".hub",
        alias="dataDir",
        description="State dir: hub database, cookie secret, local user homes.",
    )
    db_url: str | None = Field(None, alias="dbUrl")
    admins: list[str] = Field(default_factory=list)
    groups: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Groups loaded at start (dev); OAuth manages them otherwise.",
    )
    spawner: Literal["local", "kubernetes"] = "local"
    namespace: str | None = None
    default_url: str = Field("/lab", alias="defaultUrl")
    notebook_port: int = Field(
        8888,
        alias="notebookPort",
        ge=1,
        le=65535,
        description="Port the single-user server listens on (Kubernetes).",
    )
    notebook_bind: Literal["all", "podIP"] = Field(
        "all",
        alias="notebookBind",
        description="'all': 0.0.0.0; 'podIP': only the pod's own address (pods sharing a host network).",
    )
    notebook_args: list[str] = Field(
        default_factory=list,
        alias="notebookArgs",
        description="Extra arguments for jupyterhub-singleuser.",
    )
    notebook_image: str | None = Field(
        None,
        alias="notebookImage",
        description="The notebook image of profiles that name none (as Zero-to-JupyterHub's "
        "singleuser.image).",
    )
    start_timeout: int = Field(
        300,
        alias="startTimeout",
        ge=10,
        description="Seconds a notebook (its pod) may take to start.",
    )
    http_timeout: int = Field(
        120,
        alias="httpTimeout",
        ge=10,
        description="Seconds a started notebook may take to answer.",
    )


class DevAuth(StrictModel):
    """The dev login: any username with one shared password (a trial, or ``make hub``)."""

    user_password: str = Field(alias="userPassword", min_length=8)
    admin_password: str | None = Field(None, alias="adminPassword", min_length=32)
    allow_on_public_address: bool = Field(
        False,
        alias="allowOnPublicAddress",
        description="The chart refuses to put the dev login (anyone may log in as anyone "
        "who knows the one password) on a LoadBalancer, NodePort or Ingress without this.",
    )


class GenericOAuth(StrictModel):
    client_id: str = Field(alias="clientId")
    client_secret: str = Field(alias="clientSecret")
    authorize_url: str = Field(alias="authorizeUrl")
    token_url: str = Field(alias="tokenUrl")
    userdata_url: str = Field(alias="userdataUrl")
    callback_url: str = Field(alias="callbackUrl")
    scope: list[str] = Field(default_factory=lambda: ["openid", "profile", "email"])
    username_claim: str = Field(
        alias="usernameClaim",
        description="The claim that names a user, for good: one the identity provider never "
        "reassigns and users cannot edit (its `sub`, or an employee id; not a display name). "
        "Users, their jobs and their GPU-hours are keyed by it.",
    )
    groups_claim: str | None = Field(
        "groups",
        alias="groupsClaim",
        description="Claim holding the user's groups; the hub then manages groups.",
    )
    admin_groups: list[str] = Field(default_factory=list, alias="adminGroups")
    allowed_users: list[str] = Field(
        default_factory=list, alias="allowedUsers", description="Users who may log in."
    )
    allowed_groups: list[str] = Field(
        default_factory=list,
        alias="allowedGroups",
        description="Groups (groupsClaim) whose members may log in.",
    )

    @model_validator(mode="after")
    def _someone_allowed(self) -> GenericOAuth:
        if not (self.allowed_users or self.allowed_groups or self.admin_groups):
            raise ValueError(
                "name who may log in: allowedGroups or allowedUsers (every account of the "
                "identity provider is not allowed)"
            )
        if (self.allowed_groups or self.admin_groups) and not self.groups_claim:
            raise ValueError("allowedGroups and adminGroups need groupsClaim")
        return self


class AuthSection(StrictModel):
    type: Literal["dev", "generic-oauth"] = "dev"
    dev: DevAuth | None = None
    generic_oauth: GenericOAuth | None = Field(None, alias="genericOAuth")

    @model_validator(mode="after")
    def _matching(self) -> AuthSection:
        if self.type == "dev" and self.dev is None:
            raise ValueError("type 'dev' needs a 'dev' section with userPassword")
        if self.type == "generic-oauth" and self.generic_oauth is None:
            raise ValueError("type 'generic-oauth' needs a 'genericOAuth' section")
        return self


class TeamPreemption(StrictModel):
    """Kueue's ClusterQueue preemption policy, in its words."""

    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = Field(
        "Any",
        alias="reclaimWithinCohort",
        description="Preempt other teams' jobs that borrow this team's quota.",
    )
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = Field(
        "LowerPriority",
        alias="withinClusterQueue",
        description="Preempt the team's own lower-priority jobs.",
    )


class Team(StrictModel):
    name: str
    groups: list[str] = Field(description="Hub groups whose members belong to the team.")
    admin_groups: list[str] = Field(default_factory=list, alias="adminGroups")
    admins: list[str] = Field(default_factory=list, description="Users who administer the team.")
    queue: str = Field(description="The team's Kueue LocalQueue name.")
    namespace: str | None = Field(
        None,
        description="On Kubernetes, the namespace of the team's TrainJobs, trainer pods and "
        "LocalQueue (the chart's default: <release>-<name>).",
        pattern=DNS1123_LABEL.pattern,
    )
    priority_classes: list[str] = Field(
        default_factory=list,
        alias="priorityClasses",
        description="Kueue WorkloadPriorityClasses (kueue.priorityClasses) that the team's "
        "kubectl Jobs may name; none by default.",
    )
    gpu_quota: int = Field(
        8, alias="gpuQuota", ge=0, description="GPUs the queue may hold at once."
    )
    cpu_quota: str | int | None = Field(
        None, alias="cpuQuota", description="CPU the queue's jobs may hold (default: no limit)."
    )
    memory_quota: str | None = Field(
        None,
        alias="memoryQuota",
        description="Memory the queue's jobs may hold, e.g. '4Ti' (default: no limit).",
    )
    cohort: str | None = Field(
        None, description="Kueue cohort: teams in one cohort borrow each other's unused GPUs."
    )
    borrowing_limit: int | None = Field(
        None,
        alias="borrowingLimit",
        ge=0,
        description="GPUs the team may borrow from its cohort (default: all unused).",
    )
    lending_limit: int | None = Field(
        None,
        alias="lendingLimit",
        ge=0,
        description="GPUs of its quota the team lends to its cohort (default: all unused).",
    )
    preemption: TeamPreemption = Field(
        default_factory=lambda: TeamPreemption(),
        description="What the team's jobs may preempt to get their quota (Kueue's policy).",
    )
    fair_sharing_weight: float | None = Field(
        None,
        alias="fairSharingWeight",
        ge=0,
        description="Weight in the cohort's fair sharing (Kueue; default 1).",
    )

    @field_validator("cpu_quota")
    @classmethod
    def _cpu(cls, v: str | int | None) -> str | int | None:
        return _quantity(v, "CPU")

    @field_validator("memory_quota")
    @classmethod
    def _memory(cls, v: str | None) -> str | None:
        return _quantity(v, "memory")  # type: ignore[return-value]

    @model_validator(mode="after")
    def _limits(self) -> Team:
        if self.cohort is None and (
            self.borrowing_limit is not None or self.lending_limit is not None
        ):
            raise ValueError("borrowingLimit and lendingLimit need a cohort")
        if self.lending_limit is not None and self.lending_limit > self.gpu_quota:
            raise ValueError(
                f"lendingLimit {self.lending_limit} exceeds the team's gpuQuota {self.gpu_quota}"
            )
        return self

    @field_validator("name", "queue", "cohort")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        if v is not None and not is_dns1123_label(v):
            raise ValueError(f"{v!r} must be a DNS-1123 label (lowercase letters, digits, '-')")
        return v


class Profile(StrictModel):
    slug: str
    display_name: str = Field(alias="displayName")
    description: str = ""
    cpu: str | int = Field(description="CPU cores guaranteed and limited, e.g. 2 or '500m'.")
    memory: str = Field(description="Memory guaranteed and limited, e.g. '8Gi'.")
    image: str | None = Field(None, description="Its notebook image (default: hub.notebookImage).")
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list, description="Pod tolerations (Kubernetes form)."
    )
    groups: list[str] = Field(
        default_factory=list, description="Groups allowed to use the profile; empty means everyone."
    )
    default: bool = False

    @field_validator("slug")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not is_dns1123_label(v):
            raise ValueError(f"{v!r} must be a DNS-1123 label")
        return v

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, v: str | int) -> str | int:
        return _quantity(v, "CPU")  # type: ignore[return-value]

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: str) -> str:
        return _quantity(v, "memory")  # type: ignore[return-value]


class StorageSection(StrictModel):
    capacity: str = "10Gi"
    storage_class: str | None = Field(None, alias="storageClass")
    mount_path: str = Field("/home/jovyan", alias="mountPath")

    @field_validator("capacity")
    @classmethod
    def _capacity(cls, v: str) -> str:
        return _quantity(v, "storage")  # type: ignore[return-value]


class CullerSection(StrictModel):
    enabled: bool = True
    timeout: int = Field(
        3600, ge=60, description="Seconds of inactivity before a notebook is stopped."
    )
    every: int = Field(300, ge=10, description="Seconds between culler runs.")
    max_age: int = Field(
        0, alias="maxAge", ge=0, description="Stop notebooks older than this (0: never)."
    )


class HubConfig(StrictModel):
    hub: HubSection = Field(default_factory=HubSection)  # type: ignore[arg-type]
    auth: AuthSection = Field(
        default_factory=lambda: AuthSection(dev=DevAuth(userPassword="aviflow-dev"))
    )
    teams: list[Team] = Field(default_factory=list)
    profiles: list[Profile] = Field(default_factory=list)
    storage: StorageSection = Field(default_factory=StorageSection)  # type: ignore[arg-type]
    culler: CullerSection = Field(default_factory=CullerSection)  # type: ignore[arg-type]
    api: ApiSection = Field(default_factory=ApiSection)  # type: ignore[arg-type]
    # Relative paths in the file are relative to the file's directory.
    _base: Path = PrivateAttr(default_factory=Path.cwd)

    @model_validator(mode="after")
    def _unique(self) -> HubConfig:
        for what, names in (
            ("team name", [t.name for t in self.teams]),
            ("team queue", [t.queue for t in self.teams]),
            ("profile slug", [p.slug for p in self.profiles]),
        ):
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"duplicate {what}: {', '.join(dup)}")
        if sum(p.default for p in self.profiles) > 1:
            raise ValueError("at most one profile may be the default")
        known = set(self.hub.groups)
        for team in self.teams:
            known.update(team.groups, team.admin_groups)
        imageless = [p.slug for p in self.profiles if not p.image]
        if imageless and not self.hub.notebook_image:
            raise ValueError(
                f"profile(s) {', '.join(imageless)} name no image: give each an image, or set "
                "hub.notebookImage for all"
            )
        for profile in self.profiles:
            unknown = sorted(set(profile.groups) - known)
            if unknown:
                raise ValueError(
                    f"profile {profile.slug!r} names group(s) {', '.join(unknown)} that no team "
                    "and no hub.groups entry has"
                )
        return self

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, source: str = "hub config") -> HubConfig:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"the top level must be a mapping, got {type(data).__name__}", source)
        problems = storable_problems(data)
        if problems:
            raise ConfigError(problems, source)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(explain(exc, HubConfig), source) from None

    @classmethod
    def from_yaml(cls, text: str, source: str = "hub config") -> HubConfig:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"not valid YAML: {exc}", source) from None
        return cls.from_dict(data, source)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")

    # -- lookups ----------------------------------------------------------------------------------
    def team_named(self, name: str) -> Team:
        for team in self.teams:
            if team.name == name:
                return team
        raise KeyError(name)

    def team_for_queue(self, queue: str) -> Team | None:
        return next((t for t in self.teams if t.queue == queue), None)

    @property
    def api_url(self) -> str:
        """Where the hub (and the proxy) reach the service."""
        return self.api.url or f"http://{self.api.bind}:{self.api.port}"

    @property
    def service_prefix(self) -> str:
        return f"/services/{SERVICE_NAME}/"

    @property
    def notebook_api_url(self) -> str:
        """What a notebook puts in front of ``api/v1/...`` to reach the service."""
        return (self.api.notebook_url or self.api_url).rstrip("/") + self.service_prefix

    def resolve(self, path: str, base: Path | None = None) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else (base or self._base) / p

    def data_path(self, base: Path | None = None) -> Path:
        return self.resolve(self.hub.data_dir, base)

    def ledger_url(self) -> str:
        return self.api.database or f"sqlite:///{self.data_path() / 'aviflow-ledger.sqlite'}"

    def run_root(self, base: Path | None = None) -> Path:
        """The run store the service's local backend writes (and hub notebooks mount)."""
        if self.api.run_root:
            return self.resolve(self.api.run_root, base)
        return self.data_path(base) / "runs"


def load_config(path: str | Path | None = None) -> HubConfig:
    """Read and validate the hub configuration (``$AVIFLOW_HUB_CONFIG`` when no path)."""
    if path is None:
        path = os.environ.get(CONFIG_ENV)
        if not path:
            raise ConfigError(f"no config file given and ${CONFIG_ENV} is not set")
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {p}: {exc.strerror}", str(p)) from None
    cfg = HubConfig.from_yaml(text, source=str(p))
    cfg._base = p.resolve().parent
    return cfg
