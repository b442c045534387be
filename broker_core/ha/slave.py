"""The slave's follower: keeps a store's log a copy of its master's (RocketMQ
``HAClient``).

It connects to the master's HA server, proves it knows the shared secret,
announces its log end, and applies what the master streams from there
(``replica.apply_chunk``), acking each chunk. When the master goes away it
reconnects with back-off and resumes from its own log end; a master that came
back shorter, or whose epochs say its log parts from this one (``epochs.py``),
has it cut its log first. It keeps the master's epochs; ``promote`` opens a
new one and leaves a writable store.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import threading
import time
from typing import TYPE_CHECKING, Any

from broker_core.errors import ReplicationError, StoreError
from broker_core.ha.configsync import ConfigApplier
from broker_core.ha.epochs import (
    Epoch,
    begin_epoch,
    parse_epochs,
    read_epochs,
    write_epochs,
)
from broker_core.ha.protocol import (
    HANDSHAKE_TIMEOUT_S,
    OFFSET,
    PROTOCOL_VERSION,
    Conn,
    Frame,
    hello_mac,
    macs_equal,
    new_nonce,
    parse_address,
    welcome_mac,
)
from broker_core.ha.replica import fingerprint, last_fingerprint
from broker_core.ha.role import ROLE_FILE, Role, read_role, write_role
from broker_core.ha.tls import handshake_error

if TYPE_CHECKING:
    from broker_core.store import MessageStore

log = logging.getLogger(__name__)

BACKOFF_MIN_S = 0.1
BACKOFF_MAX_S = 5.0
#: A master silent this long (it heartbeats every second) is taken for dead.
READ_TIMEOUT_S = 10.0


class _Promoted(Exception):
    """The role file no longer says SLAVE: stop following."""


class SlaveFollower:
    """Follow the master at ``master`` (``"host:port"``) into ``store``.

    With ``tls`` (``tls.client_context``) the link is TLS: the master's
    certificate must be signed by the context's CA and name ``server_name``
    (default: the host of ``master``).
    """

    def __init__(
        self,
        store: MessageStore,
        master: str,
        secret: bytes,
        cluster: str = "DefaultCluster",
        broker: str = "broker-a",
        tls: ssl.SSLContext | None = None,
        server_name: str | None = None,
        node: str = "",
    ) -> None:
        self.store = store
        #: this slave's identity for the master's in-sync set (controller)
        self.node = node
        self.master = master
        self.tls = tls
        self.server_name = server_name
        self.secret = secret
        self.cluster = cluster
        self.broker = broker
        self.config = ConfigApplier(store)
        self.connected = False
        self.master_end = -1
        self.last_heard_at = 0.0
        self.last_error: str | None = None
        self.connects = 0
        self.truncations = 0
        self.truncated_bytes = 0
        self.refused_chunks = 0
        self._conn: Conn | None = None
        #: The master's epochs (None: it sent none) and how many of them this
        #: store's epoch file holds (those that start by its log end).
        self._master_epochs: list[Epoch] | None = None
        self._adopted = -1
        self._progressed = False
        self._role_sig: tuple[int, int, int] | None = None
        self._is_slave = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> SlaveFollower:
        """Mark the store a slave and follow in a background thread."""
        write_role(self.store.root, Role.SLAVE, master=self.master)
        self.store.replica = True
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="ha-slave", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following (the store stays a slave until ``promote``)."""
        self._stop.set()
        conn = self._conn
        if conn is not None:
            conn.close()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.connected = False

    def promote(self, role: Role = Role.ASYNC_MASTER) -> dict[str, Any]:
        """Stop following and make the store a writable master; return the role record.

        The transaction and schedule services may then be started on it: their
        state is derived from the replicated log.
        """
        if role is Role.SLAVE:
            raise ValueError("promote to SYNC_MASTER or ASYNC_MASTER")
        self.stop()
        end = self.store.state.commit_pos
        log.warning("promoted to %s at log offset %d", role.value, end)
        record = write_role(
            self.store.root,
            role,
            promoted_at_offset=end,
            previous_master=self.master,
        )
        # Before anything else may append: the new epoch starts at this end.
        begin_epoch(self.store.state, self.store.root, promotion_cause(record))
        self.store.replica = False
        return record

    def status(self) -> dict[str, Any]:
        """Return the master, replicated end, master's end last heard, lag, state."""
        end = self.store.state.commit_pos
        return {
            "master": self.master,
            "connected": self.connected,
            "tls": self.tls is not None,
            "following": self._thread is not None and self._thread.is_alive(),
            "replicated_offset": end,
            "master_offset": self.master_end,
            "lag_bytes": max(0, self.master_end - end)
            if self.master_end >= 0
            else None,
            "last_heard_ms": int(self.last_heard_at * 1000),
            "connects": self.connects,
            "truncations": self.truncations,
            "truncated_bytes": self.truncated_bytes,
            "refused_chunks": self.refused_chunks,
            "config_applied": dict(self.config.applied),
            "last_error": self.last_error,
        }

    def _still_slave(self) -> bool:
        """Whether ``config/role.json`` still says SLAVE (re-read when it changes).

        ``promote`` in another process rewrites it: from then on writers may
        append to the store, so this follower must neither apply another chunk
        nor cut the log back to a master that is still alive.
        """
        path = self.store.root / "config" / ROLE_FILE
        try:
            st = os.stat(path)
            sig = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            sig = None
        if sig != self._role_sig:
            self._role_sig = sig
            self._is_slave = read_role(self.store.root)["role"] == Role.SLAVE.value
        return self._is_slave

    # -- following -----------------------------------------------------------
    def _run(self) -> None:
        backoff = BACKOFF_MIN_S
        while not self._stop.is_set():
            try:
                self._follow()
            except _Promoted:
                log.warning("the store was promoted: no longer following")
                # The promoting process opens the epoch too; the first wins.
                record = read_role(self.store.root)
                begin_epoch(self.store.state, self.store.root, promotion_cause(record))
                self.store.replica = False
                self._stop.set()
            except (OSError, ReplicationError, StoreError) as exc:
                if not self._stop.is_set():
                    error = f"{type(exc).__name__}: {exc}"
                    if error != self.last_error:  # once per kind, not per retry
                        log.warning("HA: following %s: %s", self.master, exc)
                    self.last_error = error
            finally:
                if self._progressed:
                    backoff = BACKOFF_MIN_S  # it applied log: start over
                self.connected = False
                conn, self._conn = self._conn, None
                if conn is not None:
                    conn.close()
            if self._stop.wait(backoff):
                return
            backoff = min(BACKOFF_MAX_S, backoff * 2)

    def _connect(self) -> Conn:
        host, port = parse_address(self.master)
        sock = socket.create_connection((host, port), timeout=HANDSHAKE_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            sock = self.tls.wrap_socket(
                sock,
                server_hostname=self.server_name or host,
                do_handshake_on_connect=False,
            )
        conn = Conn(sock)
        # Published before the TLS handshake, so that stop() can cut it short.
        self._conn = conn
        if self._stop.is_set():
            raise ConnectionError("stopping")
        if isinstance(sock, ssl.SSLSocket):
            try:
                sock.do_handshake()
            except ssl.SSLError as exc:
                raise handshake_error(exc, self.master) from exc
        return conn

    def _follow(self) -> None:
        """One connection: handshake, then apply until it ends or fails."""
        conn = self._connect()
        store = self.store
        # A TLS-only master refuses a plain slave in place of the challenge.
        kind, challenge = conn.recv_json(Frame.CHALLENGE, Frame.REFUSE)
        if kind is Frame.REFUSE:
            raise ReplicationError(f"the master refused: {challenge.get('reason')}")
        if challenge.get("version") != PROTOCOL_VERSION:
            raise ReplicationError(f"master speaks protocol {challenge.get('version')}")
        with store.state.append_lock:
            if store.state.dispatched_pos != store.state.commit_pos:
                store.repair_dispatch()
            log_end = store.state.commit_pos
        nonce = new_nonce()
        hello: dict[str, Any] = {
            "version": PROTOCOL_VERSION,
            "cluster": self.cluster,
            "broker": self.broker,
            "segment_size": store.config.segment_size,
            "log_end": log_end,
            "node": self.node,
            "last_record": last_fingerprint(store, log_end),
            "epochs": [e.as_dict() for e in read_epochs(store.root)],
            "nonce": nonce,
        }
        hello["mac"] = hello_mac(self.secret, str(challenge.get("nonce", "")), hello)
        conn.send_json(Frame.HELLO, hello)
        kind, answer = conn.recv_json(Frame.WELCOME, Frame.REFUSE)
        if kind is Frame.REFUSE:
            raise ReplicationError(f"the master refused: {answer.get('reason')}")
        if not macs_equal(
            str(answer.get("mac", "")), welcome_mac(self.secret, nonce, answer)
        ):
            raise ReplicationError("the master did not prove it knows the secret")
        if not self._still_slave():
            raise _Promoted()
        truncate_to = answer.get("truncate_to")
        check = answer.get("check")
        if truncate_to is not None and check is not None:
            mine = fingerprint(store, int(check.get("offset", -1)))
            if mine != check:
                raise ReplicationError(
                    f"the record at {check.get('offset')} is not the master's: the "
                    "logs diverged below the master's end, not cutting back"
                )
        if truncate_to is not None:
            cut = int(truncate_to)
            if store.replica_truncate(cut):
                self.truncations += 1
                self.truncated_bytes += log_end - cut
                log.warning(
                    "HA: cut %d bytes of log [%d, %d) that master %s does not "
                    "have: the messages in them are lost (they never reached "
                    "the new master)", log_end - cut, cut, log_end, self.master,
                )  # fmt: skip
        self._master_epochs = parse_epochs(answer.get("epochs"))
        self._adopted = -1
        self._adopt_epochs(store.state.commit_pos)
        start = int(answer["start"])
        if start != store.state.commit_pos:
            raise ReplicationError(
                f"the master streams from {start}, "
                f"the log ends at {store.state.commit_pos}"
            )
        self.master_end = int(answer.get("master_end", -1))
        conn.sock.settimeout(READ_TIMEOUT_S)
        self.connected = True
        self._progressed = False
        self.connects += 1
        self.last_error = None
        self.last_heard_at = time.time()
        log.info("following %s from offset %d", self.master, start)
        conn.send_offset(Frame.ACK, start)
        while not self._stop.is_set():
            kind, payload = conn.recv()
            self.last_heard_at = time.time()
            if kind is Frame.DATA:
                if not self._still_slave():
                    raise _Promoted()
                at = OFFSET.unpack_from(payload)[0]
                data = memoryview(payload)[OFFSET.size :]
                # Written before the bytes: an entry a crash leaves ahead of
                # the log describes nothing (an epoch ends by the log end).
                self._adopt_epochs(at + len(data))
                try:
                    end = store.replica_append(at, data)
                except ReplicationError:
                    self.refused_chunks += 1
                    raise
                self.master_end = max(self.master_end, end)
                self._adopt_epochs(end)
                self._progressed = True
                conn.send_offset(Frame.ACK, end)
                self.config.log_advanced(end)
            elif kind is Frame.HEARTBEAT:
                self.master_end = OFFSET.unpack(payload)[0]
                # An idle link acks too: the master takes silence for death.
                conn.send_offset(Frame.ACK, store.state.commit_pos)
            elif kind is Frame.CONFIG:
                try:
                    msg = json.loads(payload)
                    name, content = msg["name"], msg["content"]
                except (ValueError, KeyError, TypeError):
                    raise ReplicationError("a malformed CONFIG frame") from None
                self.config.apply(name, content, store.state.commit_pos)
            else:
                raise ReplicationError(f"unexpected {kind.name} from the master")

    def _adopt_epochs(self, upto: int) -> None:
        """Make the store's epoch file the master's entries that start by
        ``upto``; none if the master sent none (a master from before epochs:
        this log's writers are then unknown, the fingerprints decide)."""
        eps = self._master_epochs or []
        n = 0
        while n < len(eps) and eps[n].start <= upto:
            n += 1
        if n != self._adopted:
            if n or self._adopted != -1 or read_epochs(self.store.root):
                write_epochs(self.store.root, eps[:n])
            self._adopted = n


def promotion_cause(role: dict[str, Any]) -> str:
    """The epoch cause of the promotion that wrote ``role`` (see ``epochs.py``)."""
    return f"promoted:{role.get('since', '')}"
