"""The submit request (``POST /api/v1/jobs``), checked whole before anything is created.

The body is ``{"spec": <TrainJob>, "bundle": {"files": {name: base64}, "entrypoint": name,
"accelerateConfig": name, "origin": {...}}}``, as :class:`aviflow.backends.hub.HubBackend`
sends it. A spec problem is a :class:`~aviflow.errors.SpecError` (the notebook raises the
same class); any other problem a :class:`~aviflow.errors.RequestError`, or
:class:`TooLarge` (413). Unknown keys get a "did you mean"; file names must be plain relative
paths; messages never echo a large input. A spec with a ``script`` needs no bundle.
``origin`` is what the client says about itself (notebook, cell): only the keys and sizes of
:func:`aviflow.records.origin_claim` are kept, so it can never name another user or team
(who submitted is the caller, recorded by the submit handler).

>>> job, bundle = parse_submission(b'{"spec": {"metadata": {"name": "t"}, "spec": {"script": "1"}}}')
>>> (job.metadata.name, bundle.files, bundle.entrypoint)
('t', {'train.py': b'1'}, 'train.py')
>>> parse_submission(b'{"spec": {}, "bundel": {}}')
Traceback (most recent call last):
...
aviflow.errors.RequestError: unknown key 'bundel' in the request; did you mean 'bundle'?

An ``Idempotency-Key`` header (:func:`idempotency_key`: 1 to 255 visible ASCII characters)
makes a retried submission return the job the first one made: aviflow-api records the key
with the job id it chose and a hash of what was submitted (:func:`request_hash`), per user,
for a day. The same key with another request is a 422 (:class:`KeyReused`).

>>> idempotency_key("3f1c-retry-1"), idempotency_key(None)
('3f1c-retry-1', None)
>>> idempotency_key("two words")
Traceback (most recent call last):
...
aviflow.errors.RequestError: the Idempotency-Key header must be 1 to 255 visible ASCII characters (no spaces)
"""

from __future__ import annotations

import base64
import binascii
import difflib
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from aviflow._model import short, storable_problems
from aviflow.backends.hub import IDEMPOTENCY_HEADER
from aviflow.bundle import SCRIPT_NAME, CodeBundle
from aviflow.errors import RequestError
from aviflow.records import origin_claim
from aviflow.spec import TrainJob
from aviflow.store import MANIFEST, RUNTIME_SPEC

ENVELOPE_KEYS = ("spec", "bundle")
BUNDLE_KEYS = ("files", "entrypoint", "accelerateConfig", "origin")
MAX_BODY_BYTES = 90 << 20  # a bundle at its largest, in base64, plus the spec
MAX_BUNDLE_BYTES = 64 << 20  # decoded file contents, all files together
MAX_BUNDLE_FILES = 4096
MAX_NAME_BYTES = 1024
MAX_PART_BYTES = 255  # one path component (what file systems allow)


_KEY = re.compile(r"[\x21-\x7e]{1,255}")


class TooLarge(RequestError):
    """The request is larger than aviflow-api accepts (HTTP 413)."""

    http_status = 413


class KeyReused(RequestError):
    """An ``Idempotency-Key`` sent before with another request (HTTP 422)."""

    http_status = 422


def idempotency_key(raw: str | None) -> str | None:
    """The ``Idempotency-Key`` header's value, checked (None: not sent)."""
    if raw is None:
        return None
    if not _KEY.fullmatch(raw):
        raise RequestError(
            f"the {IDEMPOTENCY_HEADER} header must be 1 to 255 visible ASCII characters (no spaces)"
        )
    return raw


def request_hash(job: TrainJob, bundle: CodeBundle) -> str:
    """What a submission asks for, as a hash: the spec and the code (file names and
    contents, entry point, accelerate config), not the client's ``origin`` claim."""
    what = {
        "spec": job.to_dict(),
        "code": bundle.content_hash,
        "entrypoint": bundle.entrypoint,
        "accelerateConfig": bundle.accelerate_config,
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def check_keys(data: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    """Refuse a key not in ``allowed``, suggesting the closest allowed one."""
    for key in data:
        if key in allowed:
            continue
        close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(allowed)}"
        raise RequestError(f"unknown key {short(key)} in {where}; {hint}")


def parse_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise RequestError("the body is not JSON aviflow-api reads: nested too deeply") from None
    except ValueError as exc:  # also bytes that are not UTF-8
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise RequestError(f"the body is not JSON: {reason}") from None
    if not isinstance(body, dict):
        raise RequestError('the body must be an object {"spec": <TrainJob>, "bundle": {...}}')
    return body


def parse_submission(raw: bytes, dry_run: bool = False) -> tuple[TrainJob, CodeBundle]:
    """The validated TrainJob and code bundle of a submit request body (``dry_run``: the
    code is not needed, only the spec; the bundle is still checked when one is sent)."""
    body = parse_body(raw)
    check_keys(body, ENVELOPE_KEYS, "the request")
    if "spec" not in body:
        raise RequestError('the body has no "spec" (the TrainJob to submit)')
    job = TrainJob.from_dict(body["spec"])
    bundle = parse_bundle(body.get("bundle"))
    return job, bundle if dry_run else matching_bundle(job, bundle)


def matching_bundle(job: TrainJob, bundle: CodeBundle) -> CodeBundle:
    """``bundle`` with what the spec needs to run: ``spec.script`` becomes the entry point
    when none was sent (as :func:`aviflow.bundle.build_bundle` does); files the spec names
    (``scriptFile``, ``accelerate.configFile``) are read by the client, so they must come in
    the bundle."""
    spec = job.spec
    if spec.script is not None and bundle.entrypoint is None:
        if SCRIPT_NAME in bundle.files:
            raise RequestError(f"bundle.files has {SCRIPT_NAME!r} but no bundle.entrypoint")
        files = {**bundle.files, SCRIPT_NAME: spec.script.encode()}
        return replace(bundle, files=files, entrypoint=SCRIPT_NAME)
    if spec.script_file is not None and bundle.entrypoint is None:
        raise RequestError(
            "spec.scriptFile is read where the job is submitted from: send its "
            "content in bundle.files and its name as bundle.entrypoint"
        )
    if spec.accelerate.config_file is not None and bundle.accelerate_config is None:
        raise RequestError(
            "spec.accelerate.configFile is read where the job is submitted from: "
            "send it in bundle.files and its name as bundle.accelerateConfig"
        )
    return bundle


def file_name_problem(name: str) -> str | None:
    """Why ``name`` is not a plain relative path inside the bundle, or None."""
    if name == "":
        return "is empty"
    if name.startswith("/"):
        return "is absolute"
    if "\x00" in name:
        return "has a NUL byte"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid Unicode text"
    if size > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "has an empty, '.' or '..' component"
    if any(len(p.encode("utf-8")) > MAX_PART_BYTES for p in parts):
        return f"has a component longer than {MAX_PART_BYTES} bytes"
    if name == MANIFEST:
        return "is reserved for the bundle's manifest"
    if name == RUNTIME_SPEC:
        return "is reserved for the runtime's copy of the spec"
    return None


def parse_bundle(raw: Any) -> CodeBundle:
    """The code bundle of a submit request (``None``: no files)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RequestError("bundle must be an object")
    check_keys(raw, BUNDLE_KEYS, "bundle")
    problems = storable_problems(raw, "bundle")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RequestError(problems[0] + more)
    files_in = raw.get("files")
    files_in = {} if files_in is None else files_in
    if not isinstance(files_in, dict):
        raise RequestError("bundle.files must map file names to base64 content")
    if len(files_in) > MAX_BUNDLE_FILES:
        raise TooLarge(f"bundle.files has {len(files_in)} files; at most {MAX_BUNDLE_FILES}")
    files: dict[str, bytes] = {}
    total = 0
    for name, b64 in files_in.items():
        problem = file_name_problem(name)
        if problem:
            raise RequestError(f"bundle.files: the name {short(name)} {problem}")
        if not isinstance(b64, str):
            raise RequestError(f"bundle.files[{short(name)}] must be base64 text")
        try:
            files[name] = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise RequestError(f"bundle.files[{short(name)}] is not base64") from None
        total += len(files[name])
        if total > MAX_BUNDLE_BYTES:
            raise TooLarge(f"the bundle's files are larger than {MAX_BUNDLE_BYTES} bytes")
    for name in files:  # "a" and "a/b" cannot both be written
        parts = name.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in files:
                raise RequestError(
                    f"bundle.files: {short(name)} is inside the file {short('/'.join(parts[:i]))}"
                )
    entrypoint = raw.get("entrypoint")
    accelerate_config = raw.get("accelerateConfig")
    for key, value in (("entrypoint", entrypoint), ("accelerateConfig", accelerate_config)):
        if value is not None and (not isinstance(value, str) or value not in files):
            raise RequestError(f"bundle.{key} {short(value)} is not one of bundle.files")
    origin = raw.get("origin")
    origin = {} if origin is None else origin
    if not isinstance(origin, dict):
        raise RequestError("bundle.origin must be an object")
    return CodeBundle(
        files=files,
        entrypoint=entrypoint,
        accelerate_config=accelerate_config,
        origin=origin_claim(origin),  # the client's claim: never who submitted
    )
