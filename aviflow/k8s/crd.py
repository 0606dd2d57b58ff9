"""The ``trainjobs.aviflow.dev`` CustomResourceDefinition, generated from the spec model.

:func:`trainjob_crd` turns :class:`~aviflow.spec.TrainJobSpec`'s JSON schema into a
structural OpenAPI v3 schema: references inlined, optional fields as plain properties,
``int | str`` quantities as ``x-kubernetes-int-or-string``, the limits and the CEL rules
(``x-kubernetes-validations``) the model declares next to its validators. So the API server
refuses the specs :meth:`TrainJob.from_dict` refuses, with the same kind of message, and
refuses any change of ``spec`` after creation (:data:`IMMUTABLE_SPEC`). A golden test
(``tests/k8s/test_crd.py``) keeps the committed manifest
(``aviflow/k8s/trainjobs.aviflow.dev.yaml``) in step with the model::

    python -m aviflow.k8s.crd > aviflow/k8s/trainjobs.aviflow.dev.yaml

The object's ``metadata`` is Kubernetes' own: its name is a DNS subdomain (the job id when
aviflow creates it); the run's human name travels in the ``aviflow.dev/name`` annotation.
The status subresource carries :class:`~aviflow.records.JobStatus` (same keys; its schema is
generated from the record by :func:`aviflow.wire_gen.crd_status_schema`).
"""

from __future__ import annotations

import sys
from importlib.resources import files
from typing import Any

import yaml

from aviflow.spec import API_VERSION, KIND, TrainJobSpec
from aviflow.wire_gen import crd_status_schema

GROUP, VERSION = API_VERSION.split("/")
PLURAL = "trainjobs"
NAME = f"{PLURAL}.{GROUP}"
SHORT_NAMES = ["tj"]
MANIFEST = f"{NAME}.yaml"
_DROP = {"title", "additionalProperties", "$defs"}

# The status is JobStatus's wire form: its schema is generated from the record (aviflow.wire_gen).
STATUS_SCHEMA: dict[str, Any] = {
    **crd_status_schema(),
    "description": "The job's status as the controller records it (aviflow.records.JobStatus).",
}

PRINTER_COLUMNS = [
    {"name": "State", "type": "string", "jsonPath": ".status.state"},
    {"name": "Queue", "type": "string", "jsonPath": ".spec.queue"},
    {"name": "Nodes", "type": "integer", "jsonPath": ".spec.nodes"},
    {"name": "GPUs/node", "type": "integer", "jsonPath": ".spec.gpusPerNode"},
    {"name": "Attempt", "type": "integer", "jsonPath": ".status.attempt"},
    {"name": "Position", "type": "integer", "jsonPath": ".status.queuePosition"},
    {
        "name": "Start",
        "type": "string",
        "jsonPath": ".status.expectedStart.window",
        "description": "While QUEUED, when it is expected to start (UTC), or never.",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A pydantic JSON schema node as a structural Kubernetes schema node."""
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return structural(merged, defs)
    extra = {k: v for k, v in schema.items() if k not in _DROP and k != "anyOf"}
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        kinds = sorted(o.get("type", "") for o in options)
        if kinds == ["integer", "string"]:
            out: dict[str, Any] = {"x-kubernetes-int-or-string": True}
        elif len(options) == 1:
            out = structural(options[0], defs)
        else:
            raise ValueError(f"no structural schema for anyOf {schema['anyOf']}")
        if extra.get("default") is None:
            extra.pop("default", None)
        return {**out, **{k: v for k, v in extra.items() if k != "type"}}
    out = dict(extra)
    if "properties" in schema:
        out["properties"] = {k: structural(v, defs) for k, v in schema["properties"].items()}
    elif isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = structural(schema["additionalProperties"], defs)
    if "items" in schema:
        out["items"] = structural(schema["items"], defs)
    return out


# The spec is fixed at creation: the controller builds every attempt from what was submitted,
# and `kubectl get trainjobs` shows the spec. No field is meant to change; to run it otherwise,
# cancel the job and submit a new one. Metadata (the cancel annotation, labels) and the status
# subresource stay writable. A transition rule: checked on updates only, equality of the whole
# object costs what the schema's size limits allow.
IMMUTABLE_SPEC: dict[str, str] = {
    "message": (
        "the spec of a TrainJob cannot be changed after it is created; cancel the job "
        f"(`aviflow cancel ID`, or `kubectl annotate {PLURAL} ID aviflow.dev/cancel=why`) "
        "and submit a new one"
    ),
    "rule": "self == oldSelf",
}


def spec_schema() -> dict[str, Any]:
    """The structural schema of ``spec``, from :class:`~aviflow.spec.TrainJobSpec`, with the
    rule that it never changes after creation (:data:`IMMUTABLE_SPEC`)."""
    raw = TrainJobSpec.model_json_schema(by_alias=True)
    out = structural(raw, raw.get("$defs", {}))
    for name, field in TrainJobSpec.model_fields.items():
        prop = out["properties"][field.alias or name]
        if field.default_factory is not None and prop.get("type") == "object":
            prop["default"] = {}  # so the API server fills in nested defaults
    out["x-kubernetes-validations"] = [*out.get("x-kubernetes-validations", []), IMMUTABLE_SPEC]
    return out


def trainjob_crd() -> dict[str, Any]:
    """The CustomResourceDefinition of TrainJob (``kubectl apply -f`` it)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/part-of": "aviflow"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": SHORT_NAMES,
                "categories": ["aviflow"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A distributed training run (see the aviflow README).",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema(),
                                "status": STATUS_SCHEMA,
                            },
                        }
                    },
                }
            ],
        },
    }


def render() -> str:
    """The CRD as the YAML committed in this package."""
    head = "# Generated by `python -m aviflow.k8s.crd` from aviflow.spec; do not edit.\n"
    return head + yaml.safe_dump(trainjob_crd(), sort_keys=False, width=100)


def committed() -> str:
    """The CRD manifest shipped in the package (what the chart and the tests apply)."""
    return files("aviflow.k8s").joinpath(MANIFEST).read_text()


if __name__ == "__main__":
    sys.stdout.write(render())
