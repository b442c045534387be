"""TLS on the HA link: contexts for the master and the slave, and what a
failed handshake means.

Opt-in: a master given a certificate and key speaks TLS only on its HA port; a
slave given a CA verifies the master's certificate and host name. The HMAC
handshake of ``protocol.py`` runs inside TLS as before, so a slave still
proves it knows the shared secret to a master whose certificate it trusts.

One ``ssl.SSLSocket`` is never used by two threads at once: OpenSSL forbids
concurrent reads and writes on one connection, so a TLS link on the master is
served by a single thread (``HAServer._stream`` reads the acks itself), and
``Conn.close`` shuts the descriptor down rather than the ``SSLSocket``.
"""

from __future__ import annotations

import socket
import ssl

from broker_core.errors import ReplicationError
from broker_core.ha.protocol import HANDSHAKE_TIMEOUT_S, Conn, Frame

#: First byte of a TLS record carrying a handshake message (a ClientHello);
#: no HA frame type has this value.
TLS_HANDSHAKE_RECORD = 0x16
#: A TLS slave sends its ClientHello as soon as it is connected; a slave that
#: says nothing this long is a plain one waiting for the master's CHALLENGE.
CLIENT_HELLO_WAIT_S = 3.0


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """Return the master's context serving ``cert`` (PEM chain) with ``key``.

    Raises ``OSError`` if a file cannot be read, ``ssl.SSLError`` if they do
    not make a certificate and its key.
    """
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


def client_context(ca: str) -> ssl.SSLContext:
    """Return the slave's context trusting only the CA (or self-signed
    certificate) in ``ca``; it checks the master's host name.

    Raises ``OSError`` or ``ssl.SSLError`` if ``ca`` is not a PEM certificate.
    """
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def handshake_error(exc: ssl.SSLError, master: str) -> ReplicationError:
    """Return the slave's account of a TLS handshake with ``master`` that failed."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return ReplicationError(
            f"TLS: the certificate of {master} failed verification: "
            f"{exc.verify_message} "
            "(is --ha-tls-ca the CA that signed it, and --ha-tls-server-name "
            "a name it holds?)"
        )
    return ReplicationError(
        f"TLS handshake with {master} failed ({exc.reason or exc}): does the "
        "master serve its HA link with TLS (--ha-tls-cert, --ha-tls-key)?"
    )


def speaks_tls(sock: socket.socket, wait: float) -> bool:
    """Whether the peer's first byte, awaited ``wait`` seconds and left unread,
    opens a TLS handshake."""
    sock.settimeout(wait)
    try:
        first = sock.recv(1, socket.MSG_PEEK)
    except TimeoutError:
        return False
    return first == bytes([TLS_HANDSHAKE_RECORD])


def accept(ctx: ssl.SSLContext, raw: socket.socket) -> ssl.SSLSocket | None:
    """Return the master's end of ``raw`` after the TLS handshake, or None
    after refusing a slave that does not speak TLS.

    Raises ``OSError`` (``ssl.SSLError`` among them) if the handshake fails.
    """
    if not speaks_tls(raw, CLIENT_HELLO_WAIT_S):
        # A plain slave waits for the CHALLENGE: tell it why in its own
        # framing rather than leave it waiting until its read timeout.
        conn = Conn(raw)
        try:
            conn.send_json(
                Frame.REFUSE,
                {
                    "reason": "this master's HA link speaks TLS only: give the "
                    "slave --ha-tls-ca (and --ha-tls-server-name if needed)"
                },
            )
        finally:
            conn.close()
        return None
    raw.settimeout(HANDSHAKE_TIMEOUT_S)
    return ctx.wrap_socket(raw, server_side=True)
