"""Certificates and keys for a loopback test cluster (``cryptography``)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=30)

#: CN of the API server's aggregation-layer client cert (``--requestheader-allowed-names``).
FRONT_PROXY_CLIENT_CN = "front-proxy-client"


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


@dataclass
class _CA:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def _new_ca(cn: str) -> _CA:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return _CA(key, cert)


def _issue(
    ca: _CA,
    cn: str,
    *,
    orgs: tuple[str, ...] = (),
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    server: bool = False,
    client: bool = False,
) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    now = dt.datetime.now(dt.UTC)
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    b = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attrs))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = b.sign(ca.key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def server_certificate(
    cn: str, *, dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()
) -> tuple[bytes, bytes, bytes]:
    """A CA of its own and a server certificate it issued: ``(ca_pem, cert_pem, key_pem)``
    (a test's TLS Secret)."""
    ca = _new_ca(f"{cn}-ca")
    crt, key = _issue(ca, cn, dns=dns, ips=ips, server=True)
    return ca.pem, crt, key


def _write(path: Path, data: bytes, mode: int = 0o600) -> None:
    path.write_bytes(data)
    path.chmod(mode)


def generate(pki: Path) -> None:
    """Write every certificate and key the cluster needs into ``pki``.

    Files: ``ca.{crt,key}`` (cluster CA), ``apiserver.{crt,key}``, ``admin.{crt,key}``
    (``O=system:masters``), ``sa.{key,pub}`` (service-account tokens),
    ``kubelet.{crt,key}`` (the node agent's log endpoint), and
    ``webhook/tls.{crt,key}`` + ``webhook/ca.crt`` for Kueue's webhook server on
    127.0.0.1 (also used as Kueue's metrics certificate). For the aggregation layer:
    ``front-proxy-ca.{crt,key}`` (the ``--requestheader-client-ca-file``, a CA of its
    own as Kubernetes recommends), ``front-proxy-client.{crt,key}`` (the API server's
    ``--proxy-client-*`` identity, CN ``front-proxy-client``), and
    ``visibility/tls.{crt,key}`` for Kueue's visibility server (SAN
    ``visibility-server.kueue-system.svc``, the name the aggregator verifies).
    """
    pki.mkdir(parents=True, exist_ok=True)
    ca = _new_ca("aviflow-test-cluster-ca")
    _write(pki / "ca.crt", ca.pem, 0o644)
    _write(pki / "ca.key", _key_pem(ca.key))

    crt, key = _issue(
        ca,
        "kube-apiserver",
        dns=(
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
        ips=("127.0.0.1", "10.96.0.1"),
        server=True,
    )
    _write(pki / "apiserver.crt", crt, 0o644)
    _write(pki / "apiserver.key", key)

    crt, key = _issue(ca, "aviflow-test-admin", orgs=("system:masters",), client=True)
    _write(pki / "admin.crt", crt, 0o644)
    _write(pki / "admin.key", key)

    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write(pki / "sa.key", _key_pem(sa))
    _write(
        pki / "sa.pub",
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
        0o644,
    )

    crt, key = _issue(
        ca, "aviflow-fake-kubelet", dns=("localhost",), ips=("127.0.0.1",), server=True
    )
    _write(pki / "kubelet.crt", crt, 0o644)
    _write(pki / "kubelet.key", key)

    wh = pki / "webhook"
    wh.mkdir(exist_ok=True)
    crt, key = _issue(
        ca,
        "kueue-webhook-service.kueue-system.svc",
        dns=("kueue-webhook-service.kueue-system.svc", "localhost"),
        ips=("127.0.0.1",),
        server=True,
    )
    _write(wh / "tls.crt", crt, 0o644)
    _write(wh / "tls.key", key)
    _write(wh / "ca.crt", ca.pem, 0o644)

    fp = _new_ca("aviflow-test-front-proxy-ca")
    _write(pki / "front-proxy-ca.crt", fp.pem, 0o644)
    _write(pki / "front-proxy-ca.key", _key_pem(fp.key))
    crt, key = _issue(fp, FRONT_PROXY_CLIENT_CN, client=True)
    _write(pki / "front-proxy-client.crt", crt, 0o644)
    _write(pki / "front-proxy-client.key", key)

    vis = pki / "visibility"
    vis.mkdir(exist_ok=True)
    crt, key = _issue(
        ca,
        "visibility-server.kueue-system.svc",
        dns=("visibility-server.kueue-system.svc", "localhost"),
        ips=("127.0.0.1",),
        server=True,
    )
    _write(vis / "tls.crt", crt, 0o644)
    _write(vis / "tls.key", key)
