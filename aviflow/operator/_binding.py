"""Which run directory a TrainJob drives: bound by namespace and uid (``k8s.json`` in the run
directory) the first time the controller sees it, created here for a TrainJob applied with
kubectl (owner ``kubectl:<username>`` from its ``aviflow.dev/user`` annotation, team the one
whose LocalQueue it names). An id that belongs to another job, a name that cannot
be a job id, a spec that needs code shipped with it, or a ``resumeFrom`` of a job that is
neither its owner's nor its team's (:func:`resume_refusal`) is refused through ``refuse``.

A directory aviflow-api wrote is bound only to the TrainJob that carries its submission token
(annotation ``aviflow.dev/submission``), which nobody else can know: no TrainJob can take over
a directory whose own TrainJob was never made. A TrainJob that carries a token (aviflow-api
made it, after its directory) or was driven before, and has no directory, is refused, never
adopted: its ``aviflow.dev/user`` names a hub user, and adopting it would make it
``kubectl:<that name>``, another identity.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from aviflow.bundle import build_bundle
from aviflow.errors import AviflowError, JobNotFound, SpecError
from aviflow.k8s import manifests as m
from aviflow.k8s.settings import ClusterSettings
from aviflow.names import is_dns1123_label
from aviflow.spec import TrainJob
from aviflow.store import RunDir, RunStore, atomic_write, read_json

Obj = dict[str, Any]
BINDING = "k8s.json"  # in the run dir: which TrainJob (namespace, uid) drives it
# <id>-a<attempt>-<index> is a pod hostname (at most 63): room for 3-digit attempts and indexes
MAX_NAME = 52
# seconds a TrainJob of aviflow-api's may wait to see its directory (written before it, but a
# shared file system's client may cache that a name was not there) before it is refused
MISSING_GRACE = 30.0


class Binder:
    """Finds, binds or creates the run directory of a TrainJob in ``store``."""

    def __init__(
        self,
        store: RunStore,
        refuse: Callable[[Obj, str], None],
        settings: ClusterSettings | None = None,
        team_of: Callable[[str, str], str | None] = lambda namespace, queue: None,
    ) -> None:
        self.store = store
        self.refuse = refuse
        self.settings = settings or ClusterSettings()
        self.team_of = team_of  # (namespace, queue) -> the team whose LocalQueue it is

    @staticmethod
    def bound_here(run: RunDir, cr: Obj) -> bool:
        binding = read_json(run.path / BINDING, None)
        meta = cr["metadata"]
        return isinstance(binding, dict) and binding == {
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        }

    def run_dir(self, cr: Obj) -> RunDir | None:
        """The job's run directory, bound to this TrainJob; None (refused) when the id
        belongs to another TrainJob or job."""
        meta = cr["metadata"]
        name = meta["name"]
        if not is_dns1123_label(name, MAX_NAME):
            self.refuse(
                cr,
                f"a TrainJob's name is its job id: at most {MAX_NAME} lowercase letters, digits "
                f"and '-', starting and ending with a letter or digit (got {name!r})",
            )
            return None
        path = self.store.locate(name)
        if path is None:
            return self._without_directory(cr)
        run = RunDir(path)
        binding = read_json(run.path / BINDING, None)
        mine = {"namespace": meta["namespace"], "uid": meta["uid"]}
        if binding is None:
            owner = run.meta()
            token = run.submission_token()
            theirs = (meta.get("annotations") or {}).get(m.ANNOTATION_SUBMISSION)
            if (
                owner.backend != "kubernetes"
                or owner.origin.get("namespace") != meta["namespace"]
                or (token is not None and theirs != token)  # None: made before tokens
            ):
                self.refuse(cr, f"job id {name!r} belongs to another job in the run store")
                return None
            refusal = resume_refusal(self.store, run.spec(), owner.user, owner.team)
            if refusal is not None:
                self.refuse(cr, refusal)
                return None
            atomic_write(run.path / BINDING, json.dumps(mine))
            self.store.settle(name)
            return run
        if binding != mine:
            self.refuse(cr, f"job id {name!r} belongs to another TrainJob")
            return None
        return run

    def _without_directory(self, cr: Obj) -> RunDir | None:
        """A TrainJob whose id has no directory: adopted if kubectl made it, else refused
        (see the module docstring); None while one of aviflow-api's is young enough that
        its directory may not show here yet."""
        meta = cr["metadata"]
        submitted = m.ANNOTATION_SUBMISSION in (meta.get("annotations") or {})
        driven = bool((cr.get("status") or {}).get("state"))
        if not (submitted or driven):
            return self.adopt(cr)
        if not driven and _age(meta.get("creationTimestamp")) < MISSING_GRACE:
            return None  # queued again by the ticker
        self.refuse(
            cr,
            f"job {meta['name']}'s run directory is not in the run store (its submission did "
            "not complete, or the directory was removed): nothing runs; delete the TrainJob "
            "and submit the job again",
        )
        return None

    def adopt(self, cr: Obj) -> RunDir | None:
        """A TrainJob created directly (kubectl): give it a run directory of its namespace."""
        meta = cr["metadata"]
        try:
            job = TrainJob.from_dict(
                {
                    "apiVersion": cr["apiVersion"],
                    "kind": cr["kind"],
                    "metadata": {
                        "name": (meta.get("annotations") or {}).get(m.ANNOTATION_NAME)
                        or meta["name"]
                    },
                    "spec": cr.get("spec") or {},
                }
            )
            if job.spec.script_file is not None:
                raise SpecError(
                    "spec.scriptFile needs the code shipped with the job: submit it with "
                    "`aviflow submit` or %%aviflow_train, or put the code in spec.script"
                )
            if job.spec.accelerate.config_file is not None:
                raise SpecError("spec.accelerate.configFile needs `aviflow submit` too")
            bundle = build_bundle(job, base_dir=Path("/nonexistent"))
            settings = self.settings.for_queue(job.spec.queue)
            if settings.namespace != meta["namespace"]:  # its LocalQueue is not here
                raise SpecError(
                    f"queue {job.spec.queue!r} is team namespace {settings.namespace}'s, "
                    f"not {meta['namespace']}'s"
                )
            job, image = settings.pin_image(settings.pin_runtime(job))
        except AviflowError as exc:
            self.refuse(cr, str(exc))
            return None
        annotations = meta.get("annotations") or {}
        user = kubectl_owner(meta["namespace"], annotations.get(m.ANNOTATION_USER))
        team = self.team_of(meta["namespace"], job.spec.queue)
        refusal = resume_refusal(self.store, job, user, team)
        if refusal is not None:
            self.refuse(cr, refusal)
            return None
        try:
            run = self.store.create(
                job,
                bundle.store_files(),
                user,
                team=team,
                backend="kubernetes",
                code_hash=bundle.content_hash,
                origin={"namespace": meta["namespace"], "via": "kubectl"},
                job_id=meta["name"],
                image=image,
                owner_ids=self.settings.pod_ids(),
            )
        except FileExistsError as exc:
            self.refuse(cr, str(exc))
            return None
        atomic_write(
            run.path / BINDING, json.dumps({"namespace": meta["namespace"], "uid": meta["uid"]})
        )
        return run


def _age(stamp: object) -> float:
    """Seconds since a Kubernetes timestamp (``2024-05-01T12:00:00Z``); none is old.

    >>> _age(None), _age("2024-05-01T12:00:00Z") > 0
    (inf, True)
    """
    try:
        return time.time() - datetime.fromisoformat(str(stamp)).timestamp()
    except ValueError:
        return math.inf


def kubectl_owner(namespace: str, requester: object) -> str:
    """The owner of a TrainJob created with kubectl: ``kubectl:<username>``, the user the
    queue-access policy made it record (:mod:`aviflow.k8s.policy`), else
    ``kubectl-namespace:<namespace>`` (no policy there). aviflow-api refuses hub usernames
    with a ``:``, so neither can be a hub user's name.

    >>> kubectl_owner("ml", "dave"), kubectl_owner("ml", None)
    ('kubectl:dave', 'kubectl-namespace:ml')
    """
    if isinstance(requester, str) and 0 < len(requester) <= 253:
        return f"kubectl:{requester}"
    return f"kubectl-namespace:{namespace}"


def resume_refusal(store: RunStore, job: TrainJob, user: str, team: str | None) -> str | None:
    """Why ``job`` may not start from the checkpoint its ``spec.resumeFrom`` names, or None.

    The controller decides this itself, from the run store's control part, for every way a
    TrainJob comes in (aviflow-api checks it too, kubectl does not): a job resumes only from a
    job of its own owner, or of its own team. The answer is the same for a job that does not
    exist and one that is not the caller's, so it tells nobody which ids exist.
    """
    start = job.spec.resume_from
    if start is None:
        return None
    try:
        source = store.get(start.job).meta()
    except JobNotFound:
        source = None
    if source is not None and (source.user == user or (team is not None and source.team == team)):
        return None
    whose = f"{user}'s or team {team}'s" if team is not None else f"{user}'s"
    return (
        f"spec.resumeFrom: there is no job {start.job!r} of {whose} to resume from (a job "
        "resumes only from its owner's or its team's checkpoints)"
    )
