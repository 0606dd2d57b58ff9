"""The hub config's ``api`` section: where aviflow-api listens, its ledger, its lanes, and its
job backend.

``api.backend`` names an ``aviflow.backends`` entry point (:func:`aviflow.backends.backend_class`).
The backend's own section is ``api.<name>``, of the model its class declares
(``settings_model``): ``api.local`` is :class:`~aviflow.backends.local.LocalBackendSection`,
``api.kubernetes`` :class:`~aviflow.backends.kubernetes.KubernetesSection`, both checked when
the config loads (a typo fails the hub's start). :meth:`ApiSection.backend_settings` is the
selected backend's; its class turns them into what it is built from (``config_section``), so
nothing here asks which backend it is. Whether the named backend is installed is a question
for the process that builds it (aviflow-api), not for every reader of the file: an unknown
name fails there, naming the known ones.

>>> api = ApiSection.model_validate({"backend": "local", "local": {"capacity": 2}})
>>> api.backend_settings().capacity, api.kubernetes.namespace
(2, 'aviflow')
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from aviflow._model import StrictModel
from aviflow.backends import backend_class
from aviflow.backends.kubernetes import KubernetesSection
from aviflow.backends.local import LocalBackendSection
from aviflow_hub.service.lanes import LEDGER_WORKERS, READ_WORKERS, WAIT, WRITE_WORKERS

__all__ = ["ApiSection", "KubernetesSection", "LanesSection", "LocalBackendSection"]


class LanesSection(StrictModel):
    """``api.lanes``: how many calls of each kind aviflow-api runs at once (see
    :mod:`aviflow_hub.service.lanes`); one user holds at most half of each lane."""

    ledger: int = Field(
        LEDGER_WORKERS, ge=2, le=256, description="Ledger reads at once (listings, usage)."
    )
    reads: int = Field(
        READ_WORKERS, ge=2, le=256, description="Backend reads at once (a job's files, status)."
    )
    writes: int = Field(WRITE_WORKERS, ge=2, le=256, description="Submissions and cancels at once.")
    wait: float = Field(
        WAIT,
        gt=0,
        le=60,
        description="Seconds a call waits for a worker of its lane before a 503 with Retry-After.",
    )


class ApiSection(StrictModel):
    bind: str = "127.0.0.1"
    port: int = Field(8088, ge=1, le=65535)
    url: str | None = Field(
        None, description="URL the hub uses for the service (default from bind/port)."
    )
    notebook_url: str | None = Field(
        None,
        alias="notebookUrl",
        description="Base URL notebooks use for aviflow-api (default: the service URL + prefix).",
    )
    database: str | None = Field(
        None, description="SQLAlchemy URL of the ledger (default SQLite in dataDir)."
    )
    backend: str = Field("local", description="The job backend (an aviflow.backends entry point).")
    run_root: str | None = Field(None, alias="runRoot")
    # api.<name> for each built-in backend with settings: of the model its class declares
    local: LocalBackendSection = Field(
        default_factory=LocalBackendSection,  # type: ignore[arg-type]
        description="Settings of the local backend.",
    )
    kubernetes: KubernetesSection = Field(
        default_factory=lambda: KubernetesSection(),
        description="Settings of the kubernetes backend: the cluster settings "
        "(aviflow.k8s.settings.ClusterSettings) plus kubeconfig and context; runs.localPath "
        "defaults to the run root.",
    )
    external: bool = Field(
        False,
        description="aviflow-api runs on its own (the chart's Deployment): the hub does not "
        "start it and registers it with the token in $AVIFLOW_API_TOKEN.",
    )
    ingest_every: float = Field(
        1.0,
        alias="ingestEvery",
        gt=0,
        description="Seconds between two reads of the backend's change feed.",
    )
    lanes: LanesSection = Field(
        default_factory=LanesSection,  # type: ignore[arg-type]
        description="Workers of aviflow-api's lanes: a stalled backend or ledger holds only "
        "its lane; one user at most half of each.",
    )

    def backend_settings(self) -> BaseModel | None:
        """The selected backend's settings (``api.<backend>``, of its class's
        ``settings_model``); None for a backend that takes none here. An unknown backend is
        a :class:`~aviflow.errors.BackendError` naming the known ones."""
        model = backend_class(self.backend).settings_model
        if model is None or self.backend not in type(self).model_fields:
            return None
        section = getattr(self, self.backend)
        return section if isinstance(section, model) else None
