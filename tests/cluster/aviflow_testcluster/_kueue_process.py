"""Kueue on the test cluster: its CRDs, webhooks and visibility API installed, its process
started with our certificates, and the wait until it serves (a mixin of :class:`Cluster`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

from . import _build, _kueue
from ._plumbing import ClusterError, _wait

# Where Kueue v0.17.0 reads its metrics and visibility-server certificates (fixed
# paths in cmd/kueue/main.go and pkg/visibility/server.go); bind-mounted per cluster.
KUEUE_CERT_MOUNT_POINTS = (Path("/etc/kueue/metrics/certs"), Path("/visibility"))


class KueueProcess:
    """Installs and starts Kueue for :class:`~._cluster.Cluster` (which has the fields used)."""

    def _install_kueue(self, frameworks: list[str]) -> None:
        from kubernetes import client

        d, pki = self.workdir, self.workdir / "pki"
        src = _build.kueue_source_dir()
        ca = (pki / "ca.crt").read_bytes()
        port = self.ports["kueue-webhook"]
        (d / "nodes.json").write_text(json.dumps(self.nodes))
        with self.api_client() as api:
            core = client.CoreV1Api(api)
            ext = client.ApiextensionsV1Api(api)
            adm = client.AdmissionregistrationV1Api(api)
            reg = client.ApiregistrationV1Api(api)
            rbac = client.RbacAuthorizationV1Api(api)
            core.create_namespace({"metadata": {"name": _kueue.NAMESPACE}})
            names = []
            for crd in _kueue.crds(src, port, ca):
                ext.create_custom_resource_definition(crd)
                names.append(crd["metadata"]["name"])

            def established() -> bool:
                for name in names:
                    st = ext.read_custom_resource_definition(name).status
                    if not any(
                        c.type == "Established" and c.status == "True"
                        for c in (st.conditions or [])
                        if st
                    ):
                        return False
                return True

            _wait(established, 60, "Kueue CRDs Established")
            for cfg in _kueue.webhook_configurations(src, port, ca):
                if cfg["kind"] == "MutatingWebhookConfiguration":
                    adm.create_mutating_webhook_configuration(cfg)
                else:
                    adm.create_validating_webhook_configuration(cfg)
            self.api_services = []
            for obj in _kueue.visibility_objects(src, self.ports["kueue-visibility"], ca):
                kind, ns = obj["kind"], obj["metadata"].get("namespace")
                if kind == "APIService":
                    reg.create_api_service(obj)
                    self.api_services.append(obj["metadata"]["name"])
                elif kind == "Service":
                    core.create_namespaced_service(ns, obj)
                elif kind == "RoleBinding":
                    rbac.create_namespaced_role_binding(ns, obj)
                else:
                    raise ClusterError(f"unexpected {kind} in Kueue's visibility component")
        cfg_path = d / "kueue.yaml"
        cfg_path.write_text(
            yaml.safe_dump(
                _kueue.configuration(
                    webhook_port=port,
                    health_port=self.ports["kueue-health"],
                    visibility_port=self.ports["kueue-visibility"],
                    cert_dir=pki / "webhook",
                    frameworks=frameworks,
                )
            )
        )
        # Kueue (internal cert management off) loads its metrics certificate from the
        # fixed path /etc/kueue/metrics/certs and its visibility server's from
        # /visibility/tls.{crt,key} (pkg/visibility/server.go); give it ours in a
        # private mount namespace. The host directories are only mount points.
        for mount_point in KUEUE_CERT_MOUNT_POINTS:
            mount_point.mkdir(parents=True, exist_ok=True)
        metrics_certs, visibility_certs = KUEUE_CERT_MOUNT_POINTS
        self._spawn(
            "kueue",
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                f'mount --bind "$0" {metrics_certs} && mount --bind "$1" {visibility_certs}'
                ' && shift && exec "$@"',
                str(pki / "webhook"),
                str(pki / "visibility"),
                str(self.bin_dir / "kueue"),
                f"--config={cfg_path}",
                # The visibility server takes its kubeconfig from this flag only
                # (pkg/visibility/server.go); empty, k8s.io/apiserver's options fall
                # back to the in-cluster config and Kueue exits.
                f"--kubeconfig={self.kubeconfig}",
                "--feature-gates=VisibilityOnDemand=true",
                "--zap-log-level=info",
            ],
        )

    def _wait_kueue_serving(self, api, deadline: float) -> None:
        """Kueue's webhooks answering a dry-run and its visibility APIServices Available
        (Kueue starts its visibility server after /readyz answers)."""
        from kubernetes import client

        co = client.CustomObjectsApi(api)

        def webhook_ok() -> bool:
            self._check_all()
            try:
                co.create_cluster_custom_object(
                    "kueue.x-k8s.io",
                    "v1beta2",
                    "clusterqueues",
                    {
                        "apiVersion": "kueue.x-k8s.io/v1beta2",
                        "kind": "ClusterQueue",
                        "metadata": {"name": "readiness-probe"},
                        "spec": {},
                    },
                    dry_run="All",
                )
                return True
            except client.ApiException:
                return False

        _wait(webhook_ok, deadline - time.monotonic(), "Kueue webhook dry-run")

        reg = client.ApiregistrationV1Api(api)

        def api_services_available() -> bool:
            self._check_all()
            for name in self.api_services:
                st = reg.read_api_service_status(name).status
                if not any(
                    c.type == "Available" and c.status == "True"
                    for c in (st.conditions or [] if st else [])
                ):
                    return False
                # and served now (the condition lags a restarted Kueue by seconds)
                version, _, group = name.partition(".")
                try:
                    co.get_api_resources(group, version)
                except client.ApiException:
                    return False
            return True

        _wait(
            api_services_available,
            deadline - time.monotonic(),
            "Kueue visibility APIServices Available",
        )
