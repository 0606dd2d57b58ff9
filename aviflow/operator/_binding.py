"""Which run directory a TrainJob drives: bound by namespace and uid (``k8s.json`` in the run
directory) the first time the controller sees it, created here for a TrainJob applied with
kubectl (user ``kubectl-<namespace>``). An id that belongs to another job, a name that cannot
be a job id, or a spec that needs code shipped with it is refused through ``refuse``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aviflow.bundle import build_bundle
from aviflow.errors import AviflowError, SpecError
from aviflow.k8s import manifests as m
from aviflow.k8s.settings import ClusterSettings
from aviflow.names import is_dns1123_label
from aviflow.spec import TrainJob
from aviflow.store import RunDir, RunStore, atomic_write, read_json

Obj = dict[str, Any]
BINDING = "k8s.json"  # in the run dir: which TrainJob (namespace, uid) drives it
# <id>-a<attempt>-<index> is a pod hostname (at most 63): room for 3-digit attempts and indexes
MAX_NAME = 52


class Binder:
    """Finds, binds or creates the run directory of a TrainJob in ``store``."""

    def __init__(
        self,
        store: RunStore,
        refuse: Callable[[Obj, str], None],
        settings: ClusterSettings | None = None,
    ) -> None:
        self.store = store
        self.refuse = refuse
        self.settings = settings or ClusterSettings()

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
            return self.adopt(cr)
        run = RunDir(path)
        binding = read_json(run.path / BINDING, None)
        mine = {"namespace": meta["namespace"], "uid": meta["uid"]}
        if binding is None:
            origin = run.meta().origin
            if run.meta().backend != "kubernetes" or origin.get("namespace") != meta["namespace"]:
                self.refuse(cr, f"job id {name!r} belongs to another job in the run store")
                return None
            atomic_write(run.path / BINDING, json.dumps(mine))
            return run
        if binding != mine:
            self.refuse(cr, f"job id {name!r} belongs to another TrainJob")
            return None
        return run

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
            job, image = self.settings.pin_image(job)
        except AviflowError as exc:
            self.refuse(cr, str(exc))
            return None
        user = f"kubectl-{meta['namespace']}"
        try:
            run = self.store.create(
                job,
                bundle.store_files(),
                user,
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
