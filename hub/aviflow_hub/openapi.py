"""The published OpenAPI document of aviflow-api (``openapi.yaml`` beside this module)."""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Any

import yaml


@cache
def _document() -> dict[str, Any]:
    return yaml.safe_load(files("aviflow_hub").joinpath("openapi.yaml").read_text())


def openapi_document(base_url: str = "/services/aviflow-api/") -> dict[str, Any]:
    """The document with ``servers`` pointing at this service's prefix."""
    doc = dict(_document())
    doc["servers"] = [{"url": base_url.rstrip("/") + "/api/v1"}]
    return doc


def operations() -> list[tuple[str, str]]:
    """(method, path) of every documented operation."""
    return [
        (m.upper(), path)
        for path, item in _document()["paths"].items()
        for m in item
        if m in {"get", "post", "put", "delete", "patch"}
    ]
