"""Every secret and certificate a cluster needs, made by one command.

``python -m broker_core credentials DIR --host NAME=ADDR[,ADDR...] ...`` writes
into ``DIR`` (made with mode 0700):

- ``admin.token``: the bearer token every node's admin API and the console
  share (``--admin-token-file``, ``CLUSTER_ADMIN_TOKEN_FILE``);
- ``ha.secret``: the replication secret masters and slaves share
  (``--ha-secret-file``);
- ``redis.password``: for the registry's ``requirepass`` and the
  ``redis://:PASSWORD@HOST:6379/0`` URLs;
- ``ca.pem`` / ``ca-key.pem``: a private certificate authority (EC P-256);
- ``hosts/NAME/cert.pem`` / ``key.pem``: one certificate per host, signed by
  that CA, naming each ``ADDR`` (an IP address or a DNS name) for server and
  client use: the HA link (``--ha-tls-cert``/``--ha-tls-key`` on every node of
  a name, ``--ha-tls-ca ca.pem`` on each), the gRPC endpoint's TLS port and the
  admin API's.

Secret files are mode 0600. Running it again keeps what exists (the CA, the
secrets, the hosts' certificates) and adds only the hosts that are new, so a
host added later gets a certificate from the same CA; ``--renew NAME`` issues
that host's certificate again (its addresses as given now).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from broker_core.errors import CredentialsError

#: how long a host's certificate is valid (the CA: ten times that)
HOST_DAYS = 825
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


@dataclass
class Made:
    """What one run wrote (paths relative to the directory) and kept."""

    written: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def parse_host(text: str) -> tuple[str, list[str]]:
    """``NAME=ADDR[,ADDR...]`` -> (name, addresses); each address an IP or a
    DNS name."""
    name, sep, rest = text.partition("=")
    addrs = [a.strip() for a in rest.split(",") if a.strip()]
    if not sep or not _NAME.match(name) or not addrs:
        raise CredentialsError(
            f"--host {text!r}: expected NAME=ADDR[,ADDR...], e.g. "
            "broker-a-0=10.0.0.11,a0.broker.internal"
        )
    for a in addrs:
        if not _is_ip(a) and not re.match(r"^[A-Za-z0-9*][A-Za-z0-9.-]*$", a):
            raise CredentialsError(f"--host {name}: {a!r} is neither an IP nor a name")
    return name, addrs


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` whole (a temporary file renamed) with
    ``mode`` from the start: a secret is never readable by others, even
    for a moment."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _ca(
    root: Path, cluster: str, made: Made
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = root / "ca.pem", root / "ca-key.pem"
    if cert_path.exists() and key_path.exists():
        made.kept += ["ca.pem", "ca-key.pem"]
        key = serialization.load_pem_private_key(key_path.read_bytes(), None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise CredentialsError(f"{key_path} is not an EC key")
        return x509.load_pem_x509_certificate(cert_path.read_bytes()), key
    if cert_path.exists() or key_path.exists():
        raise CredentialsError(
            f"{root} holds only one of ca.pem and ca-key.pem: restore the other, "
            "or remove both to make a new CA (every host's certificate then too)"
        )
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{cluster} broker CA")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=10 * HOST_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    _write(key_path, _key_pem(key), 0o600)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    made.written += ["ca.pem", "ca-key.pem"]
    return cert, key


def _host_cert(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    name: str,
    addrs: list[str],
) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address(a)) if _is_ip(a) else x509.DNSName(a)
        for a in addrs
    ]
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=HOST_DAYS))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def make_credentials(
    root: Path,
    hosts: dict[str, list[str]],
    cluster: str = "cluster",
    renew: tuple[str, ...] = (),
) -> Made:
    """Write what is missing under ``root`` (see the module's text)."""
    unknown = set(renew) - set(hosts)
    if unknown:
        raise CredentialsError(
            f"--renew {', '.join(sorted(unknown))}: give its --host NAME=ADDR too"
        )
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    made = Made()
    for name, nbytes in (
        ("admin.token", 32),
        ("ha.secret", 32),
        ("redis.password", 24),
    ):
        path = root / name
        if path.exists() and path.read_text().strip():
            made.kept.append(name)
            continue
        _write(path, (secrets.token_urlsafe(nbytes) + "\n").encode(), 0o600)
        made.written.append(name)
    ca, ca_key = _ca(root, cluster, made)
    for name, addrs in hosts.items():
        d = root / "hosts" / name
        rel = f"hosts/{name}"
        if (d / "cert.pem").exists() and (d / "key.pem").exists() and name not in renew:
            made.kept.append(rel)
            continue
        d.mkdir(parents=True, exist_ok=True)
        cert, key = _host_cert(ca, ca_key, name, addrs)
        _write(d / "key.pem", key, 0o600)
        _write(d / "cert.pem", cert, 0o644)
        made.written.append(rel)
    return made
