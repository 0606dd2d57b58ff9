"""A container's environment and command line, as the kubelet builds them.

Pure helpers (``expand`` for ``$(VAR)``, ``field_ref`` for the downward API's
``fieldRef``, ``resource_ref`` for ``resourceFieldRef``) and ``EnvMixin``, the part of
``PodRunner`` that reads the pod's ConfigMaps and Secrets and builds ``env_for`` /
``argv_for``. A missing ConfigMap or Secret raises ``LookupError`` with the kubelet's short
message; the pod runner retries until it appears.

>>> expand("$(A)/x $$(A) $(B)", {"A": "a"})
'a/x $(A) $(B)'
"""

from __future__ import annotations

import base64
import math
import os
import re
import sys
from pathlib import Path

from kubernetes import client

from aviflow._units import parse_quantity as quantity

from . import _procs

_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined vars are replaced, ``$$`` escapes."""

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return _VAR_REF.sub(sub, value)


def field_ref(pod: dict, path: str) -> str:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.*)'\]", path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    simple = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": status.get("hostIP", ""),
        "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs", [])),
        "status.podIP": status.get("podIP", ""),
        "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs", [])),
    }
    if path == "metadata.labels":
        return "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get("labels") or {}).items()))
    if path == "metadata.annotations":
        return "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get("annotations") or {}).items()))
    if path not in simple:
        raise ValueError(f"unsupported fieldRef {path}")
    return simple[path]


def resource_ref(container: dict, node_capacity: dict, ref: dict) -> str:
    res = ref["resource"]
    kind, name = res.split(".", 1)
    resources = container.get("resources") or {}
    value = (resources.get(kind) or {}).get(name)
    if value is None and kind == "requests":
        value = (resources.get("limits") or {}).get(name)
    if value is None:
        value = node_capacity.get(name, "0")
    divisor = quantity(ref.get("divisor", "1"))
    return str(math.ceil(quantity(value) / divisor))


def _missing(kind: str, name: str, e: client.ApiException) -> LookupError:
    """The kubelet's short message for an object a pod needs (not the whole HTTP exchange)."""
    what = "not found" if e.status == 404 else f"unreadable ({e.status} {e.reason})"
    return LookupError(f'{kind} "{name}" {what}')


class EnvMixin:
    """``PodRunner``'s env/command part; uses its ``agent``, ``pod``, ``spec``, ``ip``,
    ``namespace``, ``marker`` and ``hostname()``."""

    def env_for(self, c: dict) -> dict[str, str]:
        base_path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        pybin = str(Path(sys.executable).parent)
        env: dict[str, str] = {
            "PATH": pybin + os.pathsep + base_path,
            "HOME": "/root",
            "HOSTNAME": self.hostname(),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            _procs.MARKER: self.marker,
        }
        # Services' variables, as the kubelet adds them, under the API server's own
        env.update(
            self.agent.services.env_vars(self.namespace, self.spec.get("enableServiceLinks", True))
        )
        api_port = str(self.agent.args.kubernetes_port)
        env.update(
            {
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": api_port,
                "KUBERNETES_SERVICE_PORT_HTTPS": api_port,
                "KUBERNETES_PORT": f"tcp://127.0.0.1:{api_port}",
            }
        )
        for src in c.get("envFrom") or []:
            prefix = src.get("prefix", "")
            if "configMapRef" in src:
                data = self._configmap(
                    src["configMapRef"]["name"], src["configMapRef"].get("optional", False)
                )
            else:
                data = self._secret(
                    src["secretRef"]["name"], src["secretRef"].get("optional", False)
                )
            env.update({prefix + k: v for k, v in data.items()})
        for e in c.get("env") or []:
            if "valueFrom" not in e:
                env[e["name"]] = expand(e.get("value", ""), env)
                continue
            vf = e["valueFrom"]
            if "fieldRef" in vf:
                env[e["name"]] = field_ref(self.current_pod(), vf["fieldRef"]["fieldPath"])
            elif "resourceFieldRef" in vf:
                node = self.agent.nodes[self.spec["nodeName"]]
                env[e["name"]] = resource_ref(c, node.capacity, vf["resourceFieldRef"])
            elif "configMapKeyRef" in vf:
                ref = vf["configMapKeyRef"]
                value = self._configmap(ref["name"], ref.get("optional", False)).get(ref["key"])
                if value is not None:
                    env[e["name"]] = value
            elif "secretKeyRef" in vf:
                ref = vf["secretKeyRef"]
                value = self._secret(ref["name"], ref.get("optional", False)).get(ref["key"])
                if value is not None:
                    env[e["name"]] = value
        return env

    def current_pod(self) -> dict:
        """The pod as the API will show it once our status lands (IPs included)."""
        pod = dict(self.pod)
        pod["status"] = {
            **(pod.get("status") or {}),
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
        }
        return pod

    def _configmap(self, name: str, optional: bool) -> dict[str, str]:
        try:
            return self.agent.core.read_namespaced_config_map(name, self.namespace).data or {}
        except client.ApiException as e:
            if e.status == 404 and optional:
                return {}
            raise _missing("configmap", name, e) from None

    def _secret(self, name: str, optional: bool) -> dict[str, str]:
        try:
            data = self.agent.core.read_namespaced_secret(name, self.namespace).data or {}
        except client.ApiException as e:
            if e.status == 404 and optional:
                return {}
            raise _missing("secret", name, e) from None
        return {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}

    def argv_for(self, c: dict, env: dict[str, str]) -> list[str]:
        command = [expand(a, env) for a in c.get("command") or []]
        args = [expand(a, env) for a in c.get("args") or []]
        return command + args

    def check_config(self) -> None:
        """Every container's env and command resolve (referenced ConfigMaps/Secrets exist)."""
        for c in [*(self.spec.get("initContainers") or []), *self.spec["containers"]]:
            self.argv_for(c, self.env_for(c))
