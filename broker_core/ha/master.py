"""The master's HA server: streams its commit log to slaves (RocketMQ ``HAService``).

Each slave gets a connection of its own: a handshake (``protocol.py``), then a
sender thread that streams log bytes from the slave's offset to the commit
position and on as appends arrive, and a reader thread that takes the slave's
acks (over TLS the sender takes them itself: see ``tls.py``).
``wait_replicated`` is what a SYNC_MASTER send waits on; ``replication_status``
is what an operator looks at.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker_core.errors import ReplicationError
from broker_core.ha.configsync import ConfigWatcher
from broker_core.ha.epochs import (
    begin_epoch,
    consistent_end,
    parse_epochs,
    read_epochs,
)
from broker_core.ha.protocol import (
    CHUNK_BYTES,
    FRAME,
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
from broker_core.ha.tls import accept, speaks_tls
from broker_core.record import (
    BLANK,
    BLANK_MAGIC,
    RecordCheck,
    check_record,
    physical_offset,
)

if TYPE_CHECKING:
    from broker_core.store import MessageStore

log = logging.getLogger(__name__)

#: How often a caught-up sender looks at the commit position again. Appends may
#: come from other processes of the store, so there is no in-process wake-up.
POLL_S = 0.001
HEARTBEAT_S = 1.0
LINK_TIMEOUT_S = 10.0
#: a connected slave that acked nothing this long is shown as stalled (it acks
#: every heartbeat, once a second)
STALL_S = 3.0
#: a slave that disconnected is still reported this long
GONE_KEPT_S = 600.0
CONFIG_SYNC_S = 1.0


@dataclass
class SlaveLink:
    """One connected slave, as the master sees it."""

    address: str
    conn: Conn
    start: int
    acked: int = -1
    sent: int = 0
    connected_at: float = field(default_factory=time.time)
    last_ack_at: float = 0.0
    closed: bool = False
    tls: bool = False
    #: the slave's identity as it gave it (``cluster.controller``), or ""
    node: str = ""
    #: when (time.time) it last had the whole log: the in-sync set
    caught_up_at: float = 0.0
    #: the master's log end at its previous ack
    end_at_ack: int = 0


def chunk_extent(
    view: memoryview, pos: int, limit: int, max_bytes: int
) -> tuple[int, bool]:
    """Return how many bytes from ``pos`` make whole records, and whether they
    end with the segment's blank marker; ``limit`` is the commit position in
    the segment. A record larger than ``max_bytes`` is sent whole."""
    p = pos
    while p + 8 <= limit:
        total, magic = BLANK.unpack_from(view, p)
        if magic == BLANK_MAGIC:
            return p + 8 - pos, True
        if total <= 8 or p + total > limit:
            if p == pos:
                raise ReplicationError(f"no whole record at master offset {p}")
            break
        if p + total - pos > max_bytes and p > pos:
            break
        p += total
    return p - pos, False


class HAServer:
    """Serve the commit log of ``store`` to slaves that know ``secret``.

    ``listen`` is ``"host:port"`` (port 0 picks one: see ``address``);
    ``cluster`` and ``broker`` must match what slaves announce. With ``tls``
    (``tls.server_context``) the port speaks TLS only.
    """

    def __init__(
        self,
        store: MessageStore,
        listen: str,
        secret: bytes,
        cluster: str = "DefaultCluster",
        broker: str = "broker-a",
        chunk_bytes: int = CHUNK_BYTES,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.store = store
        self.tls = tls
        self.secret = secret
        self.cluster = cluster
        self.broker = broker
        self.chunk_bytes = chunk_bytes
        host, port = parse_address(listen)
        self._sock = socket.create_server((host, port), reuse_port=False)
        self._sock.settimeout(0.2)
        bound = self._sock.getsockname()
        self.address = f"{bound[0]}:{bound[1]}"
        self._links: list[SlaveLink] = []
        #: slaves that disconnected, by identity (or address), for operators
        self._gone: dict[str, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> HAServer:
        """Open a new epoch at the log end (``epochs.py``), then serve."""
        if not self.store.replica:
            begin_epoch(self.store.state, self.store.root, "master")
        self._spawn(self._accept_loop, "ha-accept")
        return self

    def stop(self) -> None:
        """Stop listening and drop every slave connection."""
        self._stop.set()
        self._sock.close()
        with self._cond:
            links = list(self._links)
        for link in links:
            self._drop(link)
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=5)

    def _spawn(self, target: Any, name: str, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads = [x for x in self._threads if x.is_alive()]
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                sock, addr = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._spawn(self._serve, f"ha-slave-{addr[0]}:{addr[1]}", sock, addr)

    # -- one slave -----------------------------------------------------------
    def _serve(self, raw: socket.socket, addr: tuple[str, int]) -> None:
        conn = Conn(raw)
        address = f"{addr[0]}:{addr[1]}"
        try:
            if self.tls is not None:
                wrapped = accept(self.tls, raw)
                if wrapped is None:
                    log.warning("HA slave %s refused: it does not speak TLS", address)
                    return
                conn = Conn(wrapped)
            sock = conn.sock
            sock.settimeout(HANDSHAKE_TIMEOUT_S)
            shaken = self._handshake(conn, address)
            if shaken is None:
                return
            start, node = shaken
            # A slave acks every chunk and every heartbeat: silence this long,
            # or a send that cannot go out, means it is gone.
            sock.settimeout(LINK_TIMEOUT_S)
        except (OSError, ReplicationError) as exc:
            log.warning("HA handshake with %s failed: %s", address, exc)
            conn.close()
            return
        link = SlaveLink(address, conn, start, acked=start, sent=start, node=node)
        link.last_ack_at = time.time()
        link.end_at_ack = self.store.state.dispatched_pos  # in sync once it has it
        link.tls = self.tls is not None
        with self._cond:
            self._links.append(link)
            self._gone.pop(_who(link), None)
            self._cond.notify_all()
        log.info(
            "slave %s follows from offset %d%s",
            address, start, " over TLS" if link.tls else "",
        )  # fmt: skip
        if not link.tls:
            self._spawn(self._read_acks, f"ha-acks-{address}", link)
        try:
            self._stream(link)
        except (OSError, ReplicationError) as exc:
            if not link.closed:
                log.warning("HA stream to %s ended: %s", address, exc)
        finally:
            self._drop(link)

    def _handshake(self, conn: Conn, address: str) -> tuple[int, str] | None:
        """Authenticate the slave; return where to stream from and the
        identity it gave (None: refused)."""
        nonce = new_nonce()
        conn.send_json(Frame.CHALLENGE, {"version": PROTOCOL_VERSION, "nonce": nonce})
        if self.tls is None and speaks_tls(conn.sock, HANDSHAKE_TIMEOUT_S):
            raise ReplicationError(
                "the slave speaks TLS, this master's HA link is plain "
                "(start it with --ha-tls-cert and --ha-tls-key)"
            )
        _, hello = conn.recv_json(Frame.HELLO)
        slave_end = int(hello.get("log_end", 0))
        end = self.store.state.dispatched_pos
        epochs = read_epochs(self.store.root)
        theirs = parse_epochs(hello.get("epochs"))
        consistent = None
        if epochs and theirs:
            consistent = consistent_end(epochs, end, theirs, slave_end)
        reason = self._refusal(nonce, hello, slave_end, end, consistent)
        if reason:
            log.warning("HA slave %s refused: %s", address, reason)
            try:
                conn.send_json(Frame.REFUSE, {"reason": reason})
            finally:
                conn.close()
            return None
        truncate_to = check = None
        start = slave_end
        if consistent is not None and slave_end > consistent:
            # The epochs say where the logs part: the slave cuts back to there
            # (below this master's end if it has records this master never
            # had), once it has checked that its record before the cut is ours.
            truncate_to = start = consistent
            check = last_fingerprint(self.store, consistent)
            log.warning(
                "HA slave %s has %d bytes from %d on that are not this master's "
                "(by epochs): it cuts them", address, slave_end - consistent,
                consistent,
            )  # fmt: skip
        elif slave_end > end:
            # The slave cuts back to here once it has checked that its record
            # before the cut is the master's.
            truncate_to = start = end
            check = last_fingerprint(self.store, end)
        welcome: dict[str, Any] = {
            "start": start,
            "truncate_to": truncate_to,
            "check": check,
            "master_end": end,
            "epochs": [e.as_dict() for e in epochs],
        }
        welcome["mac"] = welcome_mac(self.secret, str(hello.get("nonce", "")), welcome)
        conn.send_json(Frame.WELCOME, welcome)
        return start, str(hello.get("node") or "")

    def _refusal(
        self,
        nonce: str,
        hello: dict[str, Any],
        slave_end: int,
        end: int,
        consistent: int | None = None,
    ) -> str | None:
        """Why the slave that said ``hello`` may not follow (None: it may).

        ``consistent`` is where the epochs say the two logs part (None: they
        cannot tell).
        """
        if not macs_equal(
            str(hello.get("mac", "")), hello_mac(self.secret, nonce, hello)
        ):
            return "authentication failed"
        if hello.get("version") != PROTOCOL_VERSION:
            return f"protocol version {hello.get('version')} is not {PROTOCOL_VERSION}"
        if (hello.get("cluster"), hello.get("broker")) != (self.cluster, self.broker):
            return (
                f"slave of {hello.get('cluster')}/{hello.get('broker')}, "
                f"this is {self.cluster}/{self.broker}"
            )
        seg = self.store.config.segment_size
        if hello.get("segment_size") != seg:
            return (
                f"segment size {hello.get('segment_size')} is not {seg}: the "
                f"slave's store must be created with segment_size={seg}"
            )
        if consistent is not None and slave_end > consistent:
            # Cut back, once the slave has checked the master's record there.
            return self._not_a_boundary(consistent, end)
        if slave_end > end:
            return None  # cut back, once the slave has checked the master's record
        reason = self._not_a_boundary(slave_end, end)
        theirs = hello.get("last_record")
        if not reason and isinstance(theirs, dict):
            if fingerprint(self.store, int(theirs.get("offset", -1))) != theirs:
                reason = (
                    f"the slave's record at {theirs.get('offset')} is not the "
                    "master's (the logs diverged)"
                )
        return reason

    def _not_a_boundary(self, start: int, end: int) -> str | None:
        """Why the master cannot stream from ``start`` (None if it can)."""
        commitlog = self.store.commitlog
        first = commitlog.first_offset()
        if start < first:
            return f"the slave's end {start} is before the master's log start {first}"
        if start == end or start % commitlog.segment_size == 0:
            return None
        seg = commitlog.segments.segment(start)
        if seg is not None:
            pos = start - seg.base
            chk = check_record(seg.view, pos, min(seg.size, end - seg.base), False)
            if chk.status in (RecordCheck.OK, RecordCheck.BLANK, RecordCheck.SKIP):
                if (
                    chk.status is not RecordCheck.OK
                    or physical_offset(seg.view, pos) == start
                ):
                    return None
        return (
            f"the slave's end {start} is not a record boundary of the master's log "
            "(the logs diverged)"
        )

    def _stream(self, link: SlaveLink) -> None:
        store = self.store
        state = store.state
        segments = store.commitlog.segments
        conn = link.conn
        sock = conn.sock
        watcher = ConfigWatcher(store.root)
        pos = link.start
        next_config = 0.0
        next_beat = 0.0
        while not self._stop.is_set() and not link.closed:
            if link.tls:
                self._take_acks(link)
            now = time.monotonic()
            if now >= next_config:
                # Offsets are persisted on the flusher's timer; sent when written.
                for name, content in watcher.changed():
                    conn.send_json(Frame.CONFIG, {"name": name, "content": content})
                next_config = now + CONFIG_SYNC_S
            end = state.dispatched_pos
            if pos < end:
                seg = segments.segment(pos)
                if seg is None:
                    raise ReplicationError(f"no master segment holds offset {pos}")
                a = pos - seg.base
                n, blank = chunk_extent(
                    seg.view, a, min(seg.size, end - seg.base), self.chunk_bytes
                )
                sock.sendall(FRAME.pack(Frame.DATA, OFFSET.size + n) + OFFSET.pack(pos))
                sock.sendall(seg.view[a : a + n])
                pos = seg.base + seg.size if blank else pos + n
                link.sent = pos
                continue
            if now >= next_beat:
                conn.send_offset(Frame.HEARTBEAT, end)
                next_beat = now + HEARTBEAT_S
            time.sleep(POLL_S)

    def _ack(self, link: SlaveLink, kind: Frame, payload: bytes | bytearray) -> None:
        if kind is not Frame.ACK or len(payload) != OFFSET.size:
            raise ReplicationError(f"unexpected {kind.name} from the slave")
        acked = OFFSET.unpack(payload)[0]
        with self._cond:
            link.acked = acked
            link.last_ack_at = time.time()
            # Caught up: it has what the log held at its previous ack (under
            # a steady load it never has the very end, yet keeps up).
            if acked >= link.end_at_ack:
                link.caught_up_at = link.last_ack_at
            link.end_at_ack = self.store.state.dispatched_pos
            self._cond.notify_all()

    def _take_acks(self, link: SlaveLink) -> None:
        """Take the acks that have arrived, without waiting (a TLS link: its
        sender reads them between chunks, see ``tls.py``)."""
        while (frame := link.conn.recv_nowait()) is not None:
            self._ack(link, *frame)
        if time.time() - link.last_ack_at > LINK_TIMEOUT_S:
            raise ReplicationError(f"no ack from the slave for {LINK_TIMEOUT_S:.0f}s")

    def _read_acks(self, link: SlaveLink) -> None:
        try:
            while not link.closed:
                self._ack(link, *link.conn.recv())
        except (OSError, ReplicationError) as exc:
            if not link.closed:
                log.warning("HA slave %s gone: %s", link.address, exc)
        finally:
            self._drop(link)

    def _drop(self, link: SlaveLink) -> None:
        with self._cond:
            if link.closed:
                return
            link.closed = True
            if link in self._links:
                self._links.remove(link)
            end = self.store.state.dispatched_pos
            self._gone[_who(link)] = {
                "address": link.address,
                "node": link.node or None,
                "acked_offset": link.acked,
                "master_offset": end,
                "lag_bytes": max(0, end - link.acked),
                "last_ack_ms": int(link.last_ack_at * 1000),
                "disconnected_ms": int(time.time() * 1000),
                "connected": False,
            }
            self._cond.notify_all()
        link.conn.close()

    # -- for the endpoint and operators --------------------------------------
    def wait_replicated(self, offset: int, timeout: float) -> bool:
        """Wait until a slave has applied the log up to ``offset``.

        ``offset`` is the log end after the append to wait for (the record's
        offset plus its size). Returns True once a connected slave acked it;
        False after ``timeout`` seconds, or at once if no slave is connected
        (RocketMQ's SLAVE_NOT_AVAILABLE): a SYNC_MASTER reports the send failed.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if any(s.acked >= offset for s in self._links):
                    return True
                remaining = deadline - time.monotonic()
                if not self._links or remaining <= 0:
                    return False
                self._cond.wait(remaining)

    def acked_by_node(self) -> dict[str, int]:
        """What each connected slave that named itself has acknowledged."""
        out: dict[str, int] = {}
        with self._cond:
            for s in self._links:
                if s.node and not s.closed:
                    out[s.node] = max(out.get(s.node, -1), s.acked)
        return out

    def wait_nodes(self, nodes: set[str], offset: int, timeout: float) -> bool:
        """Wait until every slave in ``nodes`` (identities) is connected and
        has acknowledged the log up to ``offset``; False after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                acked: dict[str, int] = {}
                for s in self._links:
                    if s.node and not s.closed:
                        acked[s.node] = max(acked.get(s.node, -1), s.acked)
                if all(acked.get(n, -1) >= offset for n in nodes):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)

    def in_sync(self, window_s: float) -> list[str]:
        """The identities of the connected slaves that had the whole log within
        the last ``window_s`` seconds (RocketMQ 5's SyncStateSet, less the
        master)."""
        now = time.time()
        with self._cond:
            return sorted(
                {s.node for s in self._links
                 if s.node and not s.closed and now - s.caught_up_at <= window_s}
            )  # fmt: skip

    def replication_status(self, gone: bool = False) -> list[dict[str, Any]]:
        """Return per connected slave: address, acked offset, lag in bytes,
        last ack time, and since when it is stalled (acked nothing for
        ``STALL_S``; None: it acks). With ``gone``, also the slaves that
        disconnected in the last ``GONE_KEPT_S`` (``connected`` false)."""
        end = self.store.state.dispatched_pos
        now = time.time()
        with self._cond:
            links = list(self._links)
            cutoff = (now - GONE_KEPT_S) * 1000
            for key in [
                k for k, g in self._gone.items() if g["disconnected_ms"] < cutoff
            ]:
                del self._gone[key]
            left = [dict(g) for g in self._gone.values()] if gone else []
        return [
            {
                "address": s.address,
                "acked_offset": s.acked,
                "sent_offset": s.sent,
                "master_offset": end,
                "lag_bytes": max(0, end - s.acked),
                "last_ack_ms": int(s.last_ack_at * 1000),
                "connected_since_ms": int(s.connected_at * 1000),
                "tls": s.tls,
                "node": s.node or None,
                "connected": True,
                "stalled_s": (
                    round(now - s.last_ack_at, 1)
                    if now - s.last_ack_at >= STALL_S
                    else None
                ),
            }
            for s in links
        ] + left


def _who(link: SlaveLink) -> str:
    """A slave across reconnections: its identity, else its host (a slave
    without one, such as ``replicate``, comes back from another port)."""
    return link.node or link.address.rsplit(":", 1)[0]


def start_ha_server(
    store: MessageStore,
    listen: str,
    secret: bytes,
    cluster: str = "DefaultCluster",
    broker: str = "broker-a",
    tls: ssl.SSLContext | None = None,
) -> HAServer:
    """Start serving ``store``'s log to slaves on ``listen`` (TLS only with
    ``tls``); ``stop()`` it at close."""
    return HAServer(store, listen, secret, cluster, broker, tls=tls).start()
