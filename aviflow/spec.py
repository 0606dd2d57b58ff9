"""The ``TrainJob`` spec: one declarative description of a distributed training run.

Shaped like a Kubernetes object and strict: an unknown key is an error that names the key
and suggests the closest valid one, and wrong types are never coerced.

>>> job = TrainJob.from_dict({
...     "apiVersion": "aviflow.dev/v1", "kind": "TrainJob",
...     "metadata": {"name": "tiny"},
...     "spec": {"nodes": 2, "gpusPerNode": 2, "scriptFile": "train.py"},
... })
>>> job.spec.total_gpus
4
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Final, Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from aviflow._model import StrictModel, explain, storable_problems
from aviflow._specchecks import check_relative_path, quantity_at_most
from aviflow._specdefs import (
    GPUS_PER_HGX_NODE,
    MAX_NODES,
    FsdpSharding,
    MixedPrecision,
    Strategy,
)
from aviflow._units import DURATION as _DURATION
from aviflow._units import parse_duration
from aviflow.errors import SpecError
from aviflow.names import DNS1123_LABEL, LABEL_KEY_NAME, LABEL_VALUE, is_dns1123_label, slugify

# libyaml's loader and dumper when PyYAML has them (same results, many times faster)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
API_VERSION: Final = "aviflow.dev/v1"
KIND: Final = "TrainJob"
MAX_SCRIPT_BYTES = 1 << 20
MAX_TIME_LIMIT = 30 * 86400
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_SECRETS: Final = 16
_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")  # a DNS-1123 subdomain
# Variables the runtime sets itself; a spec may not override them.
RESERVED_ENV = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "NODE_RANK",
        "GROUP_RANK",
        "JOB_COMPLETION_INDEX",
    }
)
_NAME_FORBIDDEN = re.compile(r"[/\\\x00-\x1f\x7f]")
_QUEUE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
IMAGE_REFERENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$")
_MEMORY_MAX = 64 * 2**40
_CPU_MAX = 1024


class Metadata(StrictModel):
    name: str = Field(
        description="Human name of the run; any text without slashes or control characters."
    )
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v or not v.strip():
            raise ValueError("must not be empty")
        if len(v) > 128:
            raise ValueError(f"is {len(v)} characters long; at most 128 are allowed")
        if _NAME_FORBIDDEN.search(v) or v.strip() in {".", ".."}:
            raise ValueError(
                f"{v!r} contains a slash, backslash or control character; use letters, digits, '-', '_' or '.'"
            )
        return v

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        if len(v) > 64:
            raise ValueError("at most 64 labels are allowed")
        for key, value in v.items():
            name = key.rsplit("/", 1)[-1]
            if len(name) > 63 or not LABEL_KEY_NAME.fullmatch(name) or len(key) > 253:
                raise ValueError(f"label key {key!r} is not a valid Kubernetes label key")
            if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
                raise ValueError(
                    f"label {key}={value!r}: values are at most 63 of [A-Za-z0-9-_.], starting and ending alphanumeric"
                )
        return v


def _schema(**extra: Any) -> dict[str, Any]:
    """What a field's validators check, for the generated schemas (the CRD): JSON Schema
    keywords and Kubernetes CEL rules (``x-kubernetes-validations``). The validators stay the
    checks here; these let the API server refuse the same specs."""
    return extra


def _rule(rule: str, message: str) -> dict[str, str]:
    return {"rule": rule, "message": message}


class FsdpSpec(StrictModel):
    """The choices of the ``fsdp`` strategy (FSDP2: ``torch.distributed.fsdp.fully_shard``)."""

    sharding: FsdpSharding = Field(
        "full",
        description="full: parameters are resharded after the forward pass (least memory); "
        "grad-op: they stay whole until the backward pass (more memory, less communication).",
    )
    offload: bool = Field(
        False, description="Keep the sharded parameters and optimizer state in CPU memory."
    )
    activation_checkpointing: bool = Field(
        False,
        alias="activationCheckpointing",
        description="Recompute each transformer layer's activations in the backward pass.",
    )


class AccelerateSpec(StrictModel):
    model_config = ConfigDict(
        **StrictModel.model_config,
        json_schema_extra=_schema(
            **{
                "x-kubernetes-validations": [
                    _rule(
                        "!has(self.fsdp) || (has(self.strategy) && self.strategy == 'fsdp')",
                        "fsdp options need strategy: fsdp",
                    ),
                    _rule(
                        "!(has(self.strategy) && has(self.configFile))",
                        "give a strategy or a configFile, not both",
                    ),
                ]
            }
        ),
    )

    mixed_precision: MixedPrecision = Field(
        "no",
        alias="mixedPrecision",
        description="Mixed precision of the ranks (`accelerate launch --mixed_precision`).",
    )
    strategy: Strategy | None = Field(
        None,
        description="How the model is spread over the ranks: ddp (a replica on every rank, "
        "the default) or fsdp (parameters, gradients and optimizer state sharded); rendered to "
        "the `accelerate launch` arguments.",
    )
    fsdp: FsdpSpec | None = Field(
        None, description="Options of the fsdp strategy (they need strategy: fsdp)."
    )
    config_file: str | None = Field(
        None,
        alias="configFile",
        description="An `accelerate config` YAML (FSDP, DeepSpeed, ...); passed to `accelerate launch --config_file`.",
        json_schema_extra=_schema(minLength=1, maxLength=4096),
    )

    @model_validator(mode="after")
    def _one_way(self) -> AccelerateSpec:
        if self.fsdp is not None and self.strategy != "fsdp":
            raise ValueError("fsdp options need strategy: fsdp")
        if self.strategy is not None and self.config_file is not None:
            raise ValueError("give a strategy or a configFile, not both (the file chooses its own)")
        return self

    @property
    def fsdp_options(self) -> FsdpSpec:
        """The fsdp strategy's choices, defaults where none were given."""
        return self.fsdp if self.fsdp is not None else FsdpSpec()


class CheckpointSpec(StrictModel):
    keep_last: int = Field(3, alias="keepLast", ge=1, le=1000)


class ResumeFrom(StrictModel):
    """A checkpoint of another job to start from (``%%aviflow_train --resume``)."""

    job: str = Field(
        description="Id of the job whose checkpoint to load, e.g. 'tiny-3f9a1c2b'.",
        json_schema_extra=_schema(maxLength=63, pattern=DNS1123_LABEL.pattern),
    )
    step: int = Field(ge=0, description="The checkpoint's step.")

    @field_validator("job")
    @classmethod
    def _job(cls, v: str) -> str:
        if not is_dns1123_label(v):
            raise ValueError(f"{v!r} is not a job id (ids look like 'tiny-3f9a1c2b')")
        return v


class TrainJobSpec(StrictModel):
    model_config = ConfigDict(
        **StrictModel.model_config,
        json_schema_extra=_schema(
            **{
                "x-kubernetes-validations": [
                    _rule(
                        "[has(self.script), has(self.scriptFile), has(self.command)]"
                        ".exists_one(x, x)",
                        "give exactly one of script, scriptFile or command",
                    ),
                    _rule(
                        "!has(self.scriptFile) || self.scriptFile.startsWith('/') || "
                        "!self.scriptFile.split('/').exists(p, p == '..')",
                        "scriptFile climbs out of the spec's directory with '..'",
                    ),
                ]
            }
        ),
    )

    queue: str = Field(
        "default",
        description="The team's queue (a Kueue LocalQueue on the cluster).",
        json_schema_extra=_schema(maxLength=63, pattern=_QUEUE.pattern),
    )
    nodes: int = Field(
        1,
        description="HGX nodes (one pod each on the cluster, a process group locally).",
        json_schema_extra=_schema(minimum=1, maximum=MAX_NODES),
    )
    gpus_per_node: int = Field(
        1,
        alias="gpusPerNode",
        description="GPUs per node: processes per node.",
        json_schema_extra=_schema(minimum=1, maximum=GPUS_PER_HGX_NODE),
    )
    cpu_per_node: int | str | None = Field(
        None,
        alias="cpuPerNode",
        description="CPU cores per node, a Kubernetes quantity (e.g. 96 or '500m').",
        json_schema_extra=_schema(
            **{
                "x-kubernetes-validations": [
                    _rule(
                        f"isQuantity(string(self)) && quantity(string(self)).isGreaterThan("
                        f"quantity('0')) && quantity(string(self)).compareTo(quantity('{_CPU_MAX}')) <= 0",
                        f"must be a quantity from 1m to {_CPU_MAX} cores",
                    )
                ]
            }
        ),
    )
    memory_per_node: str | None = Field(
        None,
        alias="memoryPerNode",
        description="Memory per node, a Kubernetes quantity (e.g. '512Gi').",
        json_schema_extra=_schema(
            **{
                "x-kubernetes-validations": [
                    _rule(
                        "isQuantity(self) && quantity(self).isGreaterThan(quantity('0')) && "
                        "quantity(self).compareTo(quantity('64Ti')) <= 0",
                        "must be a quantity up to 64Ti, e.g. '512Gi'",
                    )
                ]
            }
        ),
    )
    image: str | None = Field(
        None,
        description="The trainer image (default: the configured one).",
        json_schema_extra=_schema(maxLength=255, pattern=IMAGE_REFERENCE.pattern),
    )
    script: str | None = Field(
        None,
        description="The training script, inline.",
        json_schema_extra=_schema(minLength=1, maxLength=MAX_SCRIPT_BYTES),
    )
    script_file: str | None = Field(
        None,
        alias="scriptFile",
        description="The training script's path, shipped with the job by the client.",
        json_schema_extra=_schema(minLength=1, maxLength=4096),
    )
    command: list[str] | None = Field(
        None,
        description="A command to run on every rank instead of a script (argv).",
        json_schema_extra=_schema(minItems=1, maxItems=4096),
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables of every rank.",
        json_schema_extra=_schema(
            maxProperties=256,
            **{
                "x-kubernetes-validations": [
                    _rule(
                        f"self.all(k, k.matches('{_ENV_NAME.pattern}'))",
                        "variable names are [A-Za-z_][A-Za-z0-9_]*",
                    ),
                    _rule(
                        "self.all(k, !k.startsWith('AVIFLOW_') && !(k in "
                        + repr(sorted(RESERVED_ENV)).replace('"', "'")
                        + "))",
                        "variables set by the Aviflow runtime cannot be overridden",
                    ),
                ]
            },
        ),
    )
    accelerate: AccelerateSpec = Field(default_factory=AccelerateSpec)
    checkpoints: CheckpointSpec = Field(default_factory=CheckpointSpec)
    max_restarts: int = Field(
        0,
        alias="maxRestarts",
        ge=0,
        le=100,
        description="Restarts of the whole group from the latest checkpoint after a failure.",
    )
    time_limit: str | None = Field(
        None,
        alias="timeLimit",
        description="The most time the job may hold its GPUs, over all attempts (90m, 4h, 2d).",
        json_schema_extra=_schema(pattern=_DURATION.pattern),
    )
    hang_timeout: str = Field(
        "30m",
        alias="hangTimeout",
        description="A running attempt with a rank that stops beating, or (once it logs steps) "
        "with no step, for this long is reported as hung with the ranks' stacks, then restarted "
        "or failed.",
        json_schema_extra=_schema(pattern=_DURATION.pattern),
    )
    resume_from: ResumeFrom | None = Field(
        None,
        alias="resumeFrom",
        description="Start from this checkpoint of another job when the job has none of its own.",
    )
    runtime: str | None = Field(
        None,
        description="The training runtime an admin configured for the pods (RDMA devices, "
        "network, NCCL settings, a shared model cache; api.kubernetes.runtimes); default: "
        "the admin's default. The local backend has none.",
        json_schema_extra=_schema(maxLength=63, pattern=DNS1123_LABEL.pattern),
    )
    secrets: list[str] = Field(
        default_factory=list,
        description="Kubernetes Secrets of the job's team namespace, by name: each key becomes "
        "an environment variable of every rank (the runtime's own variables win). Only the "
        "names pass through Aviflow; the values never do.",
        json_schema_extra=_schema(
            maxItems=MAX_SECRETS,
            items={"type": "string", "pattern": _SECRET_NAME.pattern, "maxLength": 253},
        ),
    )

    @field_validator("nodes")
    @classmethod
    def _nodes(cls, v: int) -> int:
        if not 1 <= v <= MAX_NODES:
            raise ValueError(f"must be between 1 and {MAX_NODES}, got {v}")
        return v

    @field_validator("gpus_per_node")
    @classmethod
    def _gpus(cls, v: int) -> int:
        if not 1 <= v <= GPUS_PER_HGX_NODE:
            raise ValueError(
                f"must be between 1 and {GPUS_PER_HGX_NODE} (an HGX node has {GPUS_PER_HGX_NODE} GPUs), got {v}; use more nodes for more GPUs"
            )
        return v

    @field_validator("queue")
    @classmethod
    def _queue(cls, v: str) -> str:
        if len(v) > 63 or not _QUEUE.fullmatch(v):
            raise ValueError(
                f"{v!r} is not a queue name; use lowercase letters, digits and '-' (at most 63)"
            )
        return v

    @field_validator("cpu_per_node")
    @classmethod
    def _cpu(cls, v: int | str | None) -> int | str | None:
        return quantity_at_most(v, _CPU_MAX, f"give 1m to {_CPU_MAX} cores")

    @field_validator("memory_per_node")
    @classmethod
    def _memory(cls, v: str | None) -> str | None:
        return quantity_at_most(v, _MEMORY_MAX, "give up to 64Ti, e.g. '512Gi'")

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        if v is not None and not IMAGE_REFERENCE.fullmatch(v):
            raise ValueError(
                f"{v!r} is not an image reference, e.g. 'registry.example.com/trainer:1.0'"
            )
        return v

    @field_validator("script")
    @classmethod
    def _script(cls, v: str | None) -> str | None:
        if v is not None:
            if not v.strip():
                raise ValueError("is empty")
            if len(v.encode()) > MAX_SCRIPT_BYTES:
                raise ValueError(
                    f"is larger than {MAX_SCRIPT_BYTES} bytes; put the code in scriptFile"
                )
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            if not v or not v[0].strip():
                raise ValueError(
                    "must be a non-empty argv list, e.g. ['python', 'train.py', '--lr', '3e-4']"
                )
            if len(v) > 4096 or any("\x00" in a for a in v):
                raise ValueError("has more than 4096 arguments or a NUL byte")
        return v

    @field_validator("runtime")
    @classmethod
    def _runtime(cls, v: str | None) -> str | None:
        if v is not None and not is_dns1123_label(v):
            raise ValueError(f"{v!r} is not a runtime name (lowercase letters, digits and '-')")
        return v

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, v: list[str]) -> list[str]:
        if len(v) > MAX_SECRETS:
            raise ValueError(f"at most {MAX_SECRETS} secrets are allowed")
        for name in v:
            if len(name) > 253 or not _SECRET_NAME.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a Secret's name; use lowercase letters, digits, '-' "
                    "and '.' (at most 253)"
                )
        twice = sorted({n for n in v if v.count(n) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} named more than once")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        if len(v) > 256:
            raise ValueError("at most 256 variables are allowed")
        for key, value in v.items():
            if not _ENV_NAME.fullmatch(key):
                raise ValueError(f"{key!r} is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)")
            if key in RESERVED_ENV or key.startswith("AVIFLOW_"):
                raise ValueError(f"{key} is set by the Aviflow runtime and cannot be overridden")
            if "\x00" in value or len(value) > 32768:
                raise ValueError(f"{key}: value has a NUL byte or is longer than 32768 characters")
        return v

    @field_validator("hang_timeout")
    @classmethod
    def _hang_timeout(cls, v: str) -> str:
        seconds = parse_duration(v)
        if not 1 <= seconds <= MAX_TIME_LIMIT:
            raise ValueError(f"{v!r} is out of range; give 1s to 30d, e.g. '30m'")
        return v

    @field_validator("time_limit")
    @classmethod
    def _time_limit(cls, v: str | None) -> str | None:
        if v is not None:
            seconds = parse_duration(v)
            if not 0 < seconds <= MAX_TIME_LIMIT:
                raise ValueError(f"{v!r} is out of range; give 1s to 30d")
        return v

    @model_validator(mode="after")
    def _one_entrypoint(self) -> TrainJobSpec:
        given = [
            k
            for k, a in (
                ("script", self.script),
                ("scriptFile", self.script_file),
                ("command", self.command),
            )
            if a is not None
        ]
        if len(given) != 1:
            what = "none" if not given else " and ".join(given)
            raise ValueError(f"give exactly one of script, scriptFile or command (got {what})")
        for key, path in (
            ("scriptFile", self.script_file),
            ("accelerate.configFile", self.accelerate.config_file),
        ):
            if path is not None:
                check_relative_path(key, path)
        return self

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def hang_timeout_seconds(self) -> int:
        return parse_duration(self.hang_timeout)

    @property
    def time_limit_seconds(self) -> int | None:
        return None if self.time_limit is None else parse_duration(self.time_limit)


class TrainJob(StrictModel):
    api_version: Literal["aviflow.dev/v1"] = Field(API_VERSION, alias="apiVersion")
    kind: Literal["TrainJob"] = KIND
    metadata: Metadata
    spec: TrainJobSpec

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any) -> TrainJob:
        if not isinstance(data, dict):
            raise SpecError(f"a TrainJob must be a mapping, got {type(data).__name__}")
        problems = storable_problems(data)
        if problems:
            raise SpecError(problems)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise SpecError(explain(exc, TrainJob)) from None

    @classmethod
    def from_yaml(cls, text: str) -> TrainJob:
        try:
            data = yaml.load(text, Loader=_LOADER)
        except (yaml.YAMLError, RecursionError) as exc:
            raise SpecError(f"not valid YAML: {_first_line(exc)}") from None
        return cls.from_dict(data)

    @classmethod
    def from_json(cls, text: str) -> TrainJob:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise SpecError(f"not valid JSON: {_first_line(exc)}") from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> TrainJob:
        path = Path(path)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise SpecError(f"cannot read {path}: {exc.strerror}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError(
                f"{path} is not UTF-8 text (byte {exc.start}: {raw[exc.start : exc.start + 1]!r}); "
                "save it as UTF-8"
            ) from None
        return cls.from_json(text) if path.suffix == ".json" else cls.from_yaml(text)

    # -- serialisation --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    def to_yaml(self) -> str:
        return yaml.dump(self.to_dict(), Dumper=_DUMPER, sort_keys=False)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def with_changes(self, **spec_changes: Any) -> TrainJob:
        """A copy with some ``spec`` keys (camelCase) replaced, validated again."""
        data = self.to_dict()
        data["spec"].update(spec_changes)
        return TrainJob.from_dict(data)

    @property
    def slug(self) -> str:
        """DNS-1123 label for the run name (see :func:`aviflow.names.slugify`)."""
        return slugify(self.metadata.name, max_len=40)


def _first_line(exc: BaseException) -> str:
    text = str(exc) if not isinstance(exc, RecursionError) else "nested too deeply"
    return text.splitlines()[0][:200] if text else type(exc).__name__
