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

What it keeps it checks first: a secret or key that is a symbolic link or not
a regular file is refused (a planted link would hand the secret elsewhere), a
secret readable by others is tightened to 0600 (said in the output), a CA
whose certificate and key do not belong together and a host certificate not
issued by this CA are refused (``--renew NAME`` for the latter). Two runs on
one directory take turns (a lock file, ``.lock``); every file is written
under a fresh temporary name created exclusively, never through a link.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import ipaddress
import os
import re
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from broker_core.errors import CredentialsError

#: how long a host's certificate is valid (the CA: ten times that)
HOST_DAYS = 825
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
#: one DNS label (RFC 1035, letters digits and inner hyphens, at most 63)
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
#: the CA's common name is "<cluster> broker CA", at most 64 characters
CLUSTER_MAX = 50


@dataclass
class Made:
    """What one run wrote (paths relative to the directory) and kept."""

    written: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    #: kept, but readable by others: now 0600
    tightened: list[str] = field(default_factory=list)


def parse_host(text: str) -> tuple[str, list[str]]:
    """``NAME=ADDR[,ADDR...]`` -> (name, addresses); each address an IP or a
    DNS name."""
    name, sep, rest = text.partition("=")
    addrs = [a.strip() for a in rest.split(",") if a.strip()]
    if not sep or not _NAME.fullmatch(name) or not addrs:
        raise CredentialsError(
            f"--host {text!r}: expected NAME=ADDR[,ADDR...] (NAME: letters, "
            "digits, '.', '_', '-'), e.g. broker-a-0=10.0.0.11,a0.broker.internal"
        )
    for a in addrs:
        why = _bad_address(a)
        if why:
            raise CredentialsError(f"--host {name}: {a!r} {why}")
    return name, addrs


def _bad_address(a: str) -> str | None:
    """Why ``a`` cannot be named in a certificate, or None."""
    if "%" in a:
        return "has a zone (%...): a certificate names the address alone"
    if _is_ip(a):
        return None
    if len(a) > 253:
        return "is longer than a DNS name may be (253)"
    labels = a.split(".")
    if labels[0] == "*":
        labels = labels[1:]
        if len(labels) < 2:
            return "is a wildcard over a top-level domain or nothing"
    if not all(_LABEL.fullmatch(label) for label in labels):
        return (
            "is neither an IP address nor a DNS name (labels of letters, "
            "digits and inner hyphens, 1-63 characters, separated by dots)"
        )
    if all(label.isdigit() for label in labels):
        return "is not a valid IP address"
    return None


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One run at a time on ``root`` (another waits for this one)."""
    fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` whole with ``mode`` from the start: a fresh
    temporary name created exclusively (never an existing file or a link
    planted there), then renamed over ``path``."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(tmp, flags, mode)
    try:
        try:
            os.write(fd, data)
            os.fsync(fd)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _existing(path: Path, rel: str, made: Made, secret: bool) -> bool:
    """Whether ``path`` exists as a file that can be kept: a link or anything
    but a regular file is refused; a secret others may read is made 0600."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise CredentialsError(
            f"{path} is a symbolic link: refusing to keep or write a secret "
            "through it (put the file itself there, or remove the link)"
        )
    if not stat.S_ISREG(st.st_mode):
        raise CredentialsError(f"{path} is not a regular file")
    if secret and stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o600, follow_symlinks=False)
        made.tightened.append(rel)
    return True


def _directory(path: Path) -> None:
    """``path`` made if missing; a link in its place is refused."""
    if path.is_symlink():
        raise CredentialsError(f"{path} is a symbolic link: refusing to write there")
    path.mkdir(parents=True, exist_ok=True)


def _load_key(path: Path) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise CredentialsError(
            f"{path} is not a readable PEM private key: {exc}"
        ) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CredentialsError(f"{path} is not an EC key")
    return key


def _load_cert(path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except ValueError as exc:
        raise CredentialsError(
            f"{path} is not a readable PEM certificate: {exc}"
        ) from None


def _same_key(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> bool:
    der = serialization.Encoding.DER
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(
        cert.public_key().public_bytes(der, spki)
        == key.public_key().public_bytes(der, spki)
    )


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
    have_cert = _existing(cert_path, "ca.pem", made, secret=False)
    have_key = _existing(key_path, "ca-key.pem", made, secret=True)
    if have_cert and have_key:
        made.kept += ["ca.pem", "ca-key.pem"]
        key, cert = _load_key(key_path), _load_cert(cert_path)
        if not _same_key(cert, key):
            raise CredentialsError(
                f"{cert_path} and {key_path} do not belong together (the "
                "certificate's public key is not the key's): restore the pair"
            )
        return cert, key
    if have_cert or have_key:
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
    if not 0 < len(cluster) <= CLUSTER_MAX or not cluster.isprintable():
        raise CredentialsError(
            f"--cluster {cluster!r}: 1-{CLUSTER_MAX} printable characters "
            "(it is named in the CA's certificate)"
        )
    for name, addrs in hosts.items():
        parse_host(f"{name}={','.join(addrs)}")  # the library's callers too
    _directory(root)
    os.chmod(root, 0o700)
    made = Made()
    with _locked(root):
        for name, nbytes in (
            ("admin.token", 32),
            ("ha.secret", 32),
            ("redis.password", 24),
        ):
            path = root / name
            if _existing(path, name, made, secret=True) and path.read_text().strip():
                made.kept.append(name)
                continue
            _write(path, (secrets.token_urlsafe(nbytes) + "\n").encode(), 0o600)
            made.written.append(name)
        ca, ca_key = _ca(root, cluster, made)
        _directory(root / "hosts")
        for name, addrs in hosts.items():
            d = root / "hosts" / name
            rel = f"hosts/{name}"
            _directory(d)
            has_cert = _existing(d / "cert.pem", f"{rel}/cert.pem", made, secret=False)
            has_key = _existing(d / "key.pem", f"{rel}/key.pem", made, secret=True)
            if has_cert and has_key and name not in renew:
                _check_host(d, ca, name)
                made.kept.append(rel)
                continue
            cert, key = _host_cert(ca, ca_key, name, addrs)
            _write(d / "key.pem", key, 0o600)
            _write(d / "cert.pem", cert, 0o644)
            made.written.append(rel)
    return made


def _check_host(d: Path, ca: x509.Certificate, name: str) -> None:
    """A host's kept certificate: its key's, and issued by this CA."""
    cert, key = _load_cert(d / "cert.pem"), _load_key(d / "key.pem")
    if not _same_key(cert, key):
        raise CredentialsError(
            f"{d}: cert.pem and key.pem do not belong together: --renew {name}"
        )
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise CredentialsError(
            f"{d}/cert.pem was not issued by this directory's CA: --renew {name}"
        ) from None
