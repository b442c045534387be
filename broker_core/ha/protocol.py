"""The HA wire protocol between a master and its slaves (RocketMQ ``HAConnection``).

Every frame is ``FRAME`` (type, payload length) then the payload. After the
handshake the master sends ``DATA`` (log offset + raw commit-log bytes ending
at a record boundary), ``HEARTBEAT`` (its commit position) and ``CONFIG``
(one synced JSON file); the slave sends ``ACK`` (its replicated log end).

Handshake, so that only holders of the shared secret follow or lead:

1. master -> slave ``CHALLENGE`` ``{"version", "nonce"}``
2. slave -> master ``HELLO`` ``{"version", "cluster", "broker", "segment_size",
   "log_end", "nonce", "mac"}``; ``mac`` is the HMAC-SHA256 of both nonces and
   the other fields (``hello_mac``)
3. master -> slave ``WELCOME`` ``{"start", "truncate_to", "master_end", "mac"}``
   (``mac`` over both nonces the other way round and the answer) or ``REFUSE``
   ``{"reason"}``; the slave checks the master's mac before it truncates or
   applies anything.

The stream after the handshake is not authenticated frame by frame: the HMAC
keeps out a follower without the secret, not an active man in the middle. With
TLS (``tls.py``) the frames travel inside it, the handshake unchanged.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import secrets
import socket
import ssl
import struct
from typing import Any

from broker_core.errors import ReplicationError

PROTOCOL_VERSION = 1
# Frame header: type B | payload length I (big-endian).
FRAME = struct.Struct(">BI")
# DATA payload starts with the log offset of its first byte; ACK and HEARTBEAT
# payloads are one offset.
OFFSET = struct.Struct(">q")
#: A DATA frame carries at most this much log (a larger single record is sent whole).
CHUNK_BYTES = 1 << 20
#: Largest frame accepted: a 4 MiB body record plus its header and properties.
MAX_FRAME = 8 << 20
HANDSHAKE_TIMEOUT_S = 10.0
#: Bytes asked of the socket per read (a DATA frame's rest, if larger).
RECV_BYTES = 1 << 16


class Frame(enum.IntEnum):
    CHALLENGE = 1
    HELLO = 2
    WELCOME = 3
    REFUSE = 4
    DATA = 5
    HEARTBEAT = 6
    CONFIG = 7
    ACK = 8


def new_nonce() -> str:
    return secrets.token_hex(16)


def _mac(secret: bytes, fields: dict[str, Any]) -> str:
    # Canonical JSON of the signed fields: both sides compute the same bytes.
    msg = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


def hello_mac(secret: bytes, master_nonce: str, hello: dict[str, Any]) -> str:
    """Return the slave's proof: HMAC over the master's nonce and its hello."""
    fields = {k: v for k, v in hello.items() if k != "mac"}
    return _mac(secret, {"role": "slave", "challenge": master_nonce, **fields})


def welcome_mac(secret: bytes, slave_nonce: str, welcome: dict[str, Any]) -> str:
    """Return the master's proof: HMAC over the slave's nonce and its answer."""
    fields = {k: v for k, v in welcome.items() if k != "mac"}
    return _mac(secret, {"role": "master", "challenge": slave_nonce, **fields})


def macs_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def read_secret(path: str) -> bytes:
    """Return the shared secret in ``path`` (surrounding whitespace dropped)."""
    with open(path, "rb") as fh:
        secret = fh.read().strip()
    if len(secret) < 16:
        raise ReplicationError(f"the HA secret in {path} is shorter than 16 bytes")
    return secret


class Conn:
    """A connected socket (plain or TLS) that sends and receives whole frames.

    It keeps its own receive buffer rather than a ``makefile`` reader, so that
    ``recv_nowait`` can tell whether a whole frame is already there.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = bytearray()

    def send(self, kind: Frame, payload: bytes | memoryview = b"") -> None:
        """Send one frame (header and payload in one ``sendall`` when small)."""
        head = FRAME.pack(kind, len(payload))
        if len(payload) < 65536:
            self.sock.sendall(head + bytes(payload))
        else:
            self.sock.sendall(head)
            self.sock.sendall(payload)

    def send_json(self, kind: Frame, obj: dict[str, Any]) -> None:
        self.send(kind, json.dumps(obj).encode())

    def send_offset(self, kind: Frame, offset: int) -> None:
        self.send(kind, OFFSET.pack(offset))

    def _read_some(self, want: int) -> None:
        # An SSLSocket returns at most one TLS record's bytes per call: the
        # callers loop until the frame is whole.
        chunk = self.sock.recv(max(want, RECV_BYTES))
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        self._buf += chunk

    def _frame_size(self) -> int | None:
        """Return the size of the whole frame at the buffer's head (None: the
        header is not all there yet)."""
        if len(self._buf) < FRAME.size:
            return None
        _, n = FRAME.unpack_from(self._buf)
        if n > MAX_FRAME:
            raise ReplicationError(f"a frame of {n} bytes is too large")
        return FRAME.size + n

    def _take(self, size: int) -> tuple[Frame, bytes]:
        kind = self._buf[0]
        payload = bytes(self._buf[FRAME.size : size])
        del self._buf[:size]
        try:
            return Frame(kind), payload
        except ValueError:
            raise ReplicationError(f"unknown frame type {kind}") from None

    def recv(self) -> tuple[Frame, bytes | bytearray]:
        """Return the next frame; ``ConnectionError`` when the peer closed."""
        while (size := self._frame_size()) is None:
            self._read_some(FRAME.size)
        if len(self._buf) >= size:
            return self._take(size)
        # A large frame (a DATA chunk) is read straight into its own buffer:
        # through self._buf it would be copied twice more.
        kind = self._buf[0]
        payload = bytearray(size - FRAME.size)
        have = len(self._buf) - FRAME.size
        payload[:have] = self._buf[FRAME.size :]
        self._buf.clear()
        view = memoryview(payload)
        while have < len(payload):
            got = self.sock.recv_into(view[have:])
            if not got:
                raise ConnectionError("the peer closed the connection mid-frame")
            have += got
        view.release()
        try:
            # The bytearray itself, not a bytes copy: every caller only reads it.
            return Frame(kind), payload
        except ValueError:
            raise ReplicationError(f"unknown frame type {kind}") from None

    def recv_nowait(self) -> tuple[Frame, bytes | bytearray] | None:
        """Return the next frame if it has arrived whole, else None, without
        waiting; ``ConnectionError`` when the peer closed."""
        timeout = self.sock.gettimeout()
        self.sock.settimeout(0.0)
        try:
            while (size := self._frame_size()) is None or len(self._buf) < size:
                try:
                    self._read_some(RECV_BYTES)
                except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    # SSLWantReadError: only part of a TLS record is in; the
                    # SSL object keeps it until the rest arrives.
                    return None
        finally:
            self.sock.settimeout(timeout)
        return self._take(size)

    def recv_json(self, *expected: Frame) -> tuple[Frame, dict[str, Any]]:
        """Return the next frame, which must be one of ``expected``, as JSON."""
        kind, payload = self.recv()
        if kind not in expected:
            raise ReplicationError(
                f"expected {[e.name for e in expected]}, got {kind.name}"
            )
        try:
            obj = json.loads(payload)
        except ValueError:
            raise ReplicationError(f"a {kind.name} frame is not JSON") from None
        if not isinstance(obj, dict):
            raise ReplicationError(f"a {kind.name} frame is not a JSON object")
        return kind, obj

    def close(self) -> None:
        """Close the connection; another thread blocked on it gets an OSError."""
        try:
            # At the descriptor, also for an SSLSocket: its own shutdown drops
            # the SSL object first, which a thread still in sendall or recv on
            # it would trip over (AttributeError) instead of failing cleanly.
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def parse_address(text: str) -> tuple[str, int]:
    """Return ``(host, port)`` of ``"host:port"``."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ReplicationError(f"bad address {text!r}: expected HOST:PORT")
    return host or "127.0.0.1", int(port)
