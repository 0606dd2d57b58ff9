"""The hub config's ``api`` section: each backend's section is checked by the model its class
declares when the config loads (:mod:`aviflow_hub.api_section`), and aviflow-api finds the
backend by its entry point and builds it without asking which one it is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from aviflow._model import explain
from aviflow.backends import available, backend_class
from aviflow.backends.kubernetes import KubernetesBackend
from aviflow.backends.local import LocalBackend, read_quotas
from aviflow.errors import BackendError
from aviflow_hub.api_section import ApiSection
from aviflow_hub.config import ConfigError, HubConfig
from aviflow_hub.service.context import make_backend

TEAMS = [{"name": "a", "groups": ["a"], "queue": "qa", "gpuQuota": 3}]


def problems(api: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        HubConfig.from_dict({"api": api})
    return err.value.problems


def test_each_built_in_section_is_of_its_backends_settings_model() -> None:
    for name in available():
        model = backend_class(name).settings_model
        field = ApiSection.model_fields.get(name)
        assert (field.annotation if field else None) is model, name
    assert "hub" not in ApiSection.model_fields  # the hub backend takes no settings here


@pytest.mark.parametrize(
    ("backend", "section"),
    [
        ("local", {"capacity": 0, "slots": 1, "rankLogCap": "8GB"}),
        ("kubernetes", {"namespace": "Bad_NS", "apiTimeout": {"read": 0}, "imag": "t:1"}),
    ],
)
def test_a_bad_section_for_the_selected_backend_fails_with_its_models_message(
    backend: str, section: dict[str, Any]
) -> None:
    model = backend_class(backend).settings_model
    assert model is not None
    with pytest.raises(ValidationError) as err:
        model.model_validate(section)
    expected = [f"api.{backend}.{line}" for line in explain(err.value, model)]
    assert sorted(problems({"backend": backend, backend: section})) == sorted(expected)
    assert len(expected) == 3


def test_the_models_messages_are_the_ones_admins_read() -> None:
    assert sorted(problems({"backend": "local", "local": {"capacity": 0, "slots": 1}})) == [
        "api.local.capacity: Input should be greater than or equal to 1 (got 0)",
        "api.local.slots: unknown key; valid keys: capacity, rankLogCap, usage",
    ]
    assert problems({"backend": "kubernetes", "kubernetes": {"namespace": "Bad_NS"}}) == [
        "api.kubernetes.namespace: 'Bad_NS' is not a namespace name "
        "(^[a-z0-9]([-a-z0-9]*[a-z0-9])?$)"
    ]


def test_an_unknown_backend_fails_where_it_is_built_naming_the_known_ones() -> None:
    cfg = HubConfig.from_dict({"api": {"backend": "nope"}})  # installed where aviflow-api runs?
    for build in (make_backend, lambda c: c.api.backend_settings()):
        with pytest.raises(BackendError) as err:
            build(cfg)
        assert str(err.value) == (
            "unknown backend 'nope'; available: hub, kubernetes, local (a package adds one by "
            "registering it as an 'aviflow.backends' entry point)"
        )


def test_the_selected_backends_settings() -> None:
    local = HubConfig.from_dict({"api": {"local": {"capacity": 2}}}).api
    assert local.backend_settings() is local.local and local.local.capacity == 2
    k8s = HubConfig.from_dict({"api": {"backend": "kubernetes"}}).api
    assert k8s.backend_settings() is k8s.kubernetes
    assert HubConfig.from_dict({"api": {"backend": "hub"}}).api.backend_settings() is None


def test_aviflow_api_builds_each_backend_with_the_run_root_it_uses(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    local = make_backend(
        HubConfig.from_dict({"teams": TEAMS, "api": {"runRoot": str(runs), "local": {}}})
    )
    assert isinstance(local, LocalBackend) and local.store.root == runs
    assert read_quotas(local.store) == {"qa": 3}  # held across concurrent jobs here
    k8s = make_backend(
        HubConfig.from_dict(
            {
                "teams": TEAMS,
                "api": {
                    "backend": "kubernetes",
                    "runRoot": str(runs),
                    "kubernetes": {"image": "t:1", "apiTimeout": {"read": 7}},
                },
            }
        )
    )
    assert isinstance(k8s, KubernetesBackend) and k8s.store.root == runs
    assert (k8s.settings.image, k8s.api_timeout.read) == ("t:1", 7.0)
