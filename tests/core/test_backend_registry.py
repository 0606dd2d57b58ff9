"""Backends are found only by their ``aviflow.backends`` entry points, and each class declares
its settings model and capabilities (:mod:`aviflow.backends._registry`, ``Backend``)."""

from __future__ import annotations

import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from aviflow._model import StrictModel
from aviflow.backends import _registry, available, backend_class, get_backend
from aviflow.backends.base import Backend
from aviflow.backends.hub import HubBackend
from aviflow.backends.kubernetes import KubernetesBackend, KubernetesSection
from aviflow.backends.local import LocalBackend, LocalBackendSection
from aviflow.errors import BackendError
from aviflow.k8s.settings import ClusterSettings

ROOT = Path(__file__).resolve().parents[2]
BUILT_IN = {
    "local": "aviflow.backends.local:LocalBackend",
    "hub": "aviflow.backends.hub:HubBackend",
    "kubernetes": "aviflow.backends.kubernetes:KubernetesBackend",
}
UNKNOWN = (
    "unknown backend 'nope'; available: hub, kubernetes, local (a package adds one by "
    "registering it as an 'aviflow.backends' entry point)"
)


def test_the_built_ins_are_the_packages_entry_points_and_installed() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["aviflow.backends"] == BUILT_IN
    installed = {ep.name: ep.value for ep in entry_points(group="aviflow.backends")}
    assert installed == BUILT_IN, (
        "the installed metadata is stale: pip install --no-deps -e . refreshes it"
    )
    assert available() == BUILT_IN


@pytest.mark.parametrize(
    ("name", "cls", "model", "borrowing", "authorizes"),
    [
        ("local", LocalBackend, LocalBackendSection, False, False),
        ("hub", HubBackend, None, False, True),
        ("kubernetes", KubernetesBackend, KubernetesSection, True, False),
    ],
)
def test_each_built_in_is_found_by_name_and_declares_settings_and_capabilities(
    name: str,
    cls: type[Backend],
    model: type[StrictModel] | None,
    borrowing: bool,
    authorizes: bool,
) -> None:
    assert backend_class(name) is cls and cls.name == name
    assert cls.settings_model is model
    assert (cls.reports_borrowing, cls.authorizes_reads) == (borrowing, authorizes)
    assert (Backend.settings_model, Backend.reports_borrowing, Backend.authorizes_reads) == (
        None,
        False,
        False,
    )
    if model is not None:
        assert model.model_config["extra"] == "forbid"  # a typo'd key is an error


def test_the_kubernetes_settings_are_the_controllers_plus_how_to_reach_the_cluster() -> None:
    assert issubclass(KubernetesSection, ClusterSettings)
    own = set(KubernetesSection.model_fields) - set(ClusterSettings.model_fields)
    assert own == {"kubeconfig", "context", "api_timeout"}


def test_each_class_builds_the_section_a_hosting_service_gives_it(tmp_path: Path) -> None:
    runs, quotas = tmp_path / "runs", {"qa": 8}
    assert LocalBackend.config_section(
        LocalBackendSection(capacity=2), run_root=runs, quotas=quotas
    ) == {
        "capacity": 2,
        "rank_log_cap": "8Gi",
        "usage": {"interval": 60.0, "idle": None},
        "root": str(runs),
        "quotas": {"qa": 8},
    }
    section = KubernetesSection.model_validate({"image": "t:1", "runs": {"mountPath": "/r"}})
    assert KubernetesBackend.config_section(section, run_root=runs, quotas=quotas) == {
        "image": "t:1",
        "runs": {"mountPath": "/r", "localPath": str(runs)},
    }
    mine = KubernetesSection.model_validate({"runs": {"localPath": "/mine"}})
    assert KubernetesBackend.config_section(mine, run_root=runs, quotas=quotas) == {
        "runs": {"localPath": "/mine"}
    }
    assert HubBackend.config_section(None, run_root=runs, quotas=quotas) == {}
    built = LocalBackend.from_config(
        LocalBackend.config_section(None, run_root=runs, quotas=quotas)
    )
    assert isinstance(built, LocalBackend) and built.store.root == runs


def test_an_unknown_name_says_which_are_known_and_how_to_add_one() -> None:
    with pytest.raises(BackendError) as err:
        backend_class("nope")
    assert str(err.value) == UNKNOWN
    with pytest.raises(BackendError) as err:
        get_backend("nope")
    assert str(err.value) == UNKNOWN


def test_without_package_metadata_the_error_says_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_registry, "entry_points", lambda group: [])
    with pytest.raises(BackendError) as err:
        backend_class("local")
    assert str(err.value) == (
        "unknown backend 'local': no backend is registered, so aviflow's package metadata is "
        "missing; install the package (pip install -e . in a checkout) rather than only "
        "putting it on PYTHONPATH"
    )


def _package(tmp_path: Path, dist: str, module: str, source: str, entries: str) -> None:
    """A package installed the way pip would: a module and a dist-info with entry points."""
    (tmp_path / f"{module}.py").write_text(source)
    info = tmp_path / f"{dist}-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\n")
    (info / "entry_points.txt").write_text(f"[aviflow.backends]\n{entries}\n")


PLUGIN = """
from aviflow.backends.local import LocalBackend

class SlurmBackend(LocalBackend):
    name = "slurm"

class NotABackend:
    pass
"""


def test_another_packages_backends_are_found_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _package(
        tmp_path,
        "aviflow_slurm",
        "aviflow_slurm",
        PLUGIN,
        "slurm = aviflow_slurm:SlurmBackend\nodd = aviflow_slurm:NotABackend\n"
        "gone = aviflow_slurm:Missing\nlocal = aviflow_slurm:SlurmBackend",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert backend_class("slurm").__name__ == "SlurmBackend"
    assert available()["slurm"] == "aviflow_slurm:SlurmBackend"
    with pytest.raises(BackendError) as err:
        backend_class("odd")
    assert str(err.value) == "backend 'odd' (aviflow_slurm:NotABackend) is not an aviflow Backend"
    with pytest.raises(BackendError, match=r"^backend 'gone' \(aviflow_slurm:Missing\) cannot be"):
        backend_class("gone")
    with pytest.raises(BackendError) as err:  # a built-in's name is never silently taken
        backend_class("local")
    assert str(err.value) == (
        "backend 'local' is registered for several classes: aviflow.backends.local:LocalBackend, "
        "aviflow_slurm:SlurmBackend; uninstall all but one of their packages"
    )
    with pytest.raises(BackendError, match="available: gone, hub, kubernetes, local, odd, slurm"):
        backend_class("nope")
