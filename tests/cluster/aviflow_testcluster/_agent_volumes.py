"""A pod's volumes as host directories, which the sandbox bind-mounts at each ``mountPath``.

``emptyDir`` (under the pod's ``volumes/``), ``hostPath``, ``persistentVolumeClaim`` (the
bound PV's ``hostPath``/``local`` path, else one directory per claim under
``<state-dir>/claims/<ns>/<claim>``), ``configMap``, ``secret``, ``downwardAPI`` and
``projected`` (service-account token via TokenRequest, ConfigMaps, Secrets, downward API).
"""

from __future__ import annotations

from pathlib import Path

from ._agent_env import field_ref, resource_ref


class VolumesMixin:
    """``PodRunner``'s volume part; uses its ``agent``, ``spec``, ``dir``, ``name``,
    ``namespace``, ``uid``, ``current_pod()``, ``_configmap()`` and ``_secret()``."""

    def mount_volumes(self) -> None:
        self.volumes = self.prepare_volumes()

    def prepare_volumes(self) -> dict[str, Path]:
        vols: dict[str, Path] = {}
        root = self.dir / "volumes"
        for v in self.spec.get("volumes") or []:
            name = v["name"]
            path = root / name
            if "emptyDir" in v:
                path.mkdir(parents=True, exist_ok=True)
            elif "hostPath" in v:
                path = Path(v["hostPath"]["path"])
                if (
                    v["hostPath"].get("type") in ("DirectoryOrCreate", None, "")
                    and not path.exists()
                ):
                    path.mkdir(parents=True, exist_ok=True)
            elif "persistentVolumeClaim" in v:
                path = self._pvc_dir(v["persistentVolumeClaim"]["claimName"])
            elif "configMap" in v:
                path.mkdir(parents=True, exist_ok=True)
                data = self._configmap(
                    v["configMap"]["name"], v["configMap"].get("optional", False)
                )
                _write_items(path, data, v["configMap"].get("items"))
            elif "secret" in v:
                path.mkdir(parents=True, exist_ok=True)
                data = self._secret(v["secret"]["secretName"], v["secret"].get("optional", False))
                _write_items(path, data, v["secret"].get("items"))
            elif "downwardAPI" in v:
                path.mkdir(parents=True, exist_ok=True)
                self._write_downward(path, v["downwardAPI"]["items"])
            elif "projected" in v:
                path.mkdir(parents=True, exist_ok=True)
                for s in v["projected"]["sources"]:
                    self._project(path, s)
            else:
                raise ValueError(f"volume {name}: type not supported by the node agent")
            vols[name] = path
        return vols

    def _pvc_dir(self, claim: str) -> Path:
        """A bound PV with hostPath/local uses that path; otherwise one directory per claim."""
        pvc = self.agent.core.read_namespaced_persistent_volume_claim(claim, self.namespace)
        pv_name = pvc.spec.volume_name
        if pv_name:
            pv = self.agent.core.read_persistent_volume(pv_name)
            src = pv.spec.host_path or pv.spec.local
            if src is not None:
                p = Path(src.path)
                p.mkdir(parents=True, exist_ok=True)
                return p
        p = self.agent.state_dir / "claims" / self.namespace / claim
        p.mkdir(parents=True, exist_ok=True)
        return p

    def _write_downward(self, path: Path, items: list[dict]) -> None:
        for it in items:
            if "fieldRef" in it:
                value = field_ref(self.current_pod(), it["fieldRef"]["fieldPath"])
            else:
                cname = (
                    it["resourceFieldRef"].get("containerName")
                    or self.spec["containers"][0]["name"]
                )
                c = next(x for x in self.spec["containers"] if x["name"] == cname)
                value = resource_ref(
                    c, self.agent.nodes[self.spec["nodeName"]].capacity, it["resourceFieldRef"]
                )
            target = path / it["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(value)

    def _project(self, path: Path, s: dict) -> None:
        if "serviceAccountToken" in s:
            sat = s["serviceAccountToken"]
            req = {
                "spec": {
                    "audiences": [sat["audience"]] if sat.get("audience") else None,
                    "expirationSeconds": sat.get("expirationSeconds", 3607),
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": self.name,
                        "uid": self.uid,
                    },
                }
            }
            tok = self.agent.core.create_namespaced_service_account_token(
                self.spec.get("serviceAccountName") or "default", self.namespace, req
            )
            (path / sat["path"]).write_text(tok.status.token)
        elif "configMap" in s:
            data = self._configmap(s["configMap"]["name"], s["configMap"].get("optional", False))
            _write_items(path, data, s["configMap"].get("items"))
        elif "secret" in s:
            data = self._secret(s["secret"]["name"], s["secret"].get("optional", False))
            _write_items(path, data, s["secret"].get("items"))
        elif "downwardAPI" in s:
            self._write_downward(path, s["downwardAPI"]["items"])


def _write_items(path: Path, data: dict[str, str], items: list[dict] | None) -> None:
    pairs = [(it["key"], it["path"]) for it in items] if items else [(k, k) for k in data]
    for key, rel in pairs:
        if key in data:
            target = path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(data[key])
