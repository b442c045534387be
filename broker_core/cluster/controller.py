"""The controller: who is the master of a broker name, decided by an etcd quorum.

RocketMQ 5's controller mode elects a broker name's master by Raft (DLedger)
and keeps its in-sync replicas (the SyncStateSet); here the quorum is etcd's
(``--controller http://etcd1:2379,http://etcd2:2379,...``), reached through
its v3 JSON gateway with the standard library (no client package: the four
calls used are plain HTTP POSTs). Three keys per name under
``/rocketmq/<cluster>/<name>/``:

* ``leader``: the current master (its identity, client and HA addresses),
  attached to a lease of ``lease_ttl_s``. It disappears when the master stops
  renewing, whatever the reason (killed, paused, cut off from the quorum).
* ``term``: the last store that led (no lease). Its ``mod_revision`` is the
  fencing token of the term; only the store that owns the term, or a slave
  in that term's in-sync set, may take the ``leader`` key, and taking it when
  the owner changes is one transaction with writing a new term. An old
  master that comes back after a promotion therefore never leads again: it
  rejoins as a slave.
* ``isr``: the slaves in sync with the term's master (caught up within
  ``ISR_WINDOW_S``), written by that master only while the term is its own
  (compare on the token). Only these may be elected (RocketMQ's default,
  no unclean election).

Fencing. A master writes its lease's deadline into the store's shared state
(``SharedState.lease_until_ns``, CLOCK_MONOTONIC, system-wide): every
append of every process of the store refuses once it has passed
(``LeaseExpiredError``), so a master that cannot renew (paused by SIGSTOP,
partitioned from the quorum) stops writing, delivering timers and sending
check-backs before etcd can expire its lease and let a slave take over: the
deadline is counted from before each renewal was sent, with a margin.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker_core.errors import ControllerUnavailable

__all__ = ["ControllerUnavailable", "Etcd", "LeaseKeeper", "Leadership"]

log = logging.getLogger(__name__)

#: a slave stays in the in-sync set this long after it last had the whole log
ISR_WINDOW_S = 10.0
#: the share of the lease a master trusts: it fences itself after this share
#: of the TTL counted from before the renewal was sent
LEASE_TRUST = 0.75


def _b64(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode()


class Etcd:
    """The etcd v3 JSON gateway of a cluster's members (tried in turn)."""

    def __init__(self, endpoints: list[str], timeout_s: float = 1.0) -> None:
        if not endpoints:
            raise ValueError("the controller needs at least one etcd endpoint")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.timeout_s = timeout_s
        self._good = 0

    @classmethod
    def from_url(cls, urls: str, timeout_s: float = 1.0) -> Etcd:
        eps = []
        for u in urls.split(","):
            u = u.strip()
            if not u:
                continue
            if u.startswith("etcd://"):
                u = "http://" + u.removeprefix("etcd://")
            elif "://" not in u:
                u = "http://" + u
            eps.append(u)
        return cls(eps, timeout_s)

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``path`` on the first member that answers; a member
        without a quorum times out and the next is tried."""
        data = json.dumps(body).encode()
        errors = []
        n = len(self.endpoints)
        for i in range(n):
            k = (self._good + i) % n
            url = self.endpoints[k] + path
            req = urllib.request.Request(
                url, data=data, headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                    out = json.loads(r.read() or b"{}")
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:300].decode(errors="replace")
                errors.append(f"{self.endpoints[k]}: HTTP {exc.code} {detail}")
                continue
            except (OSError, ValueError) as exc:
                errors.append(f"{self.endpoints[k]}: {exc}")
                continue
            if isinstance(out, dict) and "error" in out and "result" not in out:
                errors.append(f"{self.endpoints[k]}: {out.get('error')}")
                continue
            self._good = k
            return out if isinstance(out, dict) else {}
        raise ControllerUnavailable("no etcd member answered: " + "; ".join(errors))

    def get(self, key: str) -> tuple[dict[str, Any] | None, int]:
        """The key's value (JSON) and ``mod_revision`` (None, 0: absent)."""
        value, revision, _ = self.get_with_lease(key)
        return value, revision

    def get_with_lease(self, key: str) -> tuple[dict[str, Any] | None, int, int]:
        """The key's value, ``mod_revision`` and lease (None, 0, 0: absent)."""
        out = self.call("/v3/kv/range", {"key": _b64(key)})
        kvs = out.get("kvs") or []
        if not kvs:
            return None, 0, 0
        kv = kvs[0]
        value = json.loads(base64.b64decode(kv.get("value", "")) or b"null")
        return value, int(kv.get("mod_revision", 0)), int(kv.get("lease", 0) or 0)

    def grant(self, ttl_s: int) -> int:
        out = self.call("/v3/lease/grant", {"TTL": str(ttl_s)})
        return int(out["ID"])

    def keepalive(self, lease: int) -> int:
        """Renew ``lease``; its TTL, 0 if it has expired."""
        out = self.call("/v3/lease/keepalive", {"ID": str(lease)})
        return int((out.get("result") or {}).get("TTL", 0) or 0)

    def revoke(self, lease: int) -> None:
        self.call("/v3/lease/revoke", {"ID": str(lease)})

    def txn(
        self, compare: list[dict[str, Any]], success: list[dict[str, Any]]
    ) -> tuple[bool, int]:
        """Whether the comparisons held (and ``success`` was applied), and
        the revision after the transaction."""
        out = self.call("/v3/kv/txn", {"compare": compare, "success": success})
        return bool(out.get("succeeded")), int(out["header"]["revision"])

    def put_op(self, key: str, value: Any, lease: int = 0) -> dict[str, Any]:
        op: dict[str, Any] = {"key": _b64(key), "value": _b64(json.dumps(value))}
        if lease:
            op["lease"] = str(lease)
        return {"request_put": op}

    @staticmethod
    def same_mod(key: str, revision: int) -> dict[str, Any]:
        """Compare: the key's mod_revision is ``revision`` (0: it is absent)."""
        if revision == 0:
            return {
                "key": _b64(key), "target": "CREATE", "result": "EQUAL",
                "create_revision": "0",
            }  # fmt: skip
        return {
            "key": _b64(key), "target": "MOD", "result": "EQUAL",
            "mod_revision": str(revision),
        }  # fmt: skip


@dataclass
class Leadership:
    """This node's side of the controller for one broker name (module doc)."""

    etcd: Etcd
    cluster: str
    name: str
    #: this store's identity: ``<name>/<broker id>@<client address>``
    identity: str
    lease_ttl_s: int = 6
    #: extra fields of the ``leader`` value (addresses)
    describe: Callable[[], dict[str, Any]] = field(default=lambda: {})
    #: this node's own ``--role`` is SYNC_MASTER: the group's mode when it
    #: opens the name's first term
    configured_sync: bool = False
    #: the group's mode as the current term records it (``term``'s ``sync``):
    #: written by the master that opened the first term, inherited by every
    #: later term, so an elected slave knows the group is SYNC
    sync: bool = False
    lease: int = 0
    #: the term's fencing token (the ``term`` key's mod_revision) while leading
    token: int = 0
    #: CLOCK_MONOTONIC ns until which this node may act as master (0: never)
    deadline_ns: int = 0
    last_error: str = ""

    @property
    def prefix(self) -> str:
        return f"/rocketmq/{self.cluster}/{self.name}"

    @property
    def leading(self) -> bool:
        return self.token != 0 and time.monotonic_ns() < self.deadline_ns

    # -- reads -------------------------------------------------------------------
    def leader(self) -> dict[str, Any] | None:
        return self.etcd.get(self.prefix + "/leader")[0]

    def term(self) -> tuple[dict[str, Any] | None, int]:
        return self.etcd.get(self.prefix + "/term")

    def in_sync(self) -> tuple[list[str], int]:
        """The in-sync set as the term's master last wrote it, and the term
        it was written in."""
        isr, _ = self.etcd.get(self.prefix + "/isr")
        if not isr:
            return [], 0
        return list(isr.get("members") or []), int(isr.get("term") or 0)

    def why_not(self, as_slave: bool) -> str | None:
        """Why this store may not lead now (None: it may campaign)."""
        leader, _ = self.etcd.get(self.prefix + "/leader")
        if leader is not None and leader.get("node") != self.identity:
            return f"{leader.get('node')} is the master of {self.name}"
        term, term_rev = self.term()
        if term is None or term.get("owner") == self.identity:
            return None
        if not as_slave:
            return (
                f"{term.get('owner')} led {self.name} after this store (term "
                f"{term_rev}): start this store as its slave"
            )
        members, of_term = self.in_sync()
        if of_term != term_rev or self.identity not in members:
            return (
                f"this slave is not in the in-sync set of term {term_rev} "
                f"({', '.join(members) or 'empty'}): it may lack acknowledged "
                "messages"
            )
        return None

    # -- writes ------------------------------------------------------------------
    def campaign(self, as_slave: bool = False) -> bool:
        """Take the ``leader`` key if this store may (``why_not``); on success
        this node leads a term until its lease runs out."""
        why = self.why_not(as_slave)
        if why is not None:
            self.last_error = why
            return False
        leader_key, term_key = self.prefix + "/leader", self.prefix + "/term"
        _, leader_rev = self.etcd.get(leader_key)
        term, term_rev = self.term()
        sent = time.monotonic_ns()  # before the grant: the lease runs from then
        lease = self.etcd.grant(self.lease_ttl_s)
        value = {"node": self.identity, **self.describe()}
        ops = [self.etcd.put_op(leader_key, value, lease)]
        keep_term = term is not None and term.get("owner") == self.identity
        recorded = (term or {}).get("sync")
        mode = recorded if isinstance(recorded, bool) else self.configured_sync
        if not keep_term:
            ops.append(
                self.etcd.put_op(term_key, {"owner": self.identity, "sync": mode})
            )
        ok, revision = self.etcd.txn(
            [self.etcd.same_mod(leader_key, leader_rev),
             self.etcd.same_mod(term_key, term_rev)],
            ops,
        )  # fmt: skip
        if not ok:
            self.last_error = "another node campaigned at the same time"
            try:
                self.etcd.revoke(lease)
            except ControllerUnavailable:
                pass
            return False
        self.lease = lease
        self.sync = mode
        self.token = term_rev if keep_term else revision
        self.deadline_ns = sent + int(self.lease_ttl_s * LEASE_TRUST * 1e9)
        self.last_error = ""
        log.warning("%s leads %s (term %d, lease %x)",
                    self.identity, self.name, self.token, lease)  # fmt: skip
        return True

    def renew(self, in_sync: list[str] | None = None) -> bool:
        """Renew the lease (and write the in-sync set); False once this node
        no longer leads (lease gone, key taken, or no quorum until the
        deadline passes)."""
        if not self.token:
            return False
        sent = time.monotonic_ns()
        try:
            ttl = self.etcd.keepalive(self.lease)
            leader, _, lease = self.etcd.get_with_lease(self.prefix + "/leader")
            _, term_rev = self.term()
        except ControllerUnavailable as exc:
            self.last_error = str(exc)
            return self.leading
        if (
            ttl <= 0
            or leader is None
            or leader.get("node") != self.identity
            or lease != self.lease  # taken over (this store, restarted)
            or term_rev != self.token
        ):
            self.last_error = "the lease ran out or the term moved on"
            self.token = 0
            self.deadline_ns = 0
            return False
        self.deadline_ns = sent + int(self.lease_ttl_s * LEASE_TRUST * 1e9)
        self.last_error = ""
        if in_sync is not None and in_sync != self.in_sync()[0]:
            try:
                self.write_in_sync(in_sync)
            except ControllerUnavailable as exc:
                self.last_error = str(exc)
        return True

    def write_in_sync(self, members: list[str]) -> bool:
        """Write the in-sync set, only while the term is this node's (False:
        it is not; ``ControllerUnavailable``: no quorum)."""
        key = self.prefix + "/isr"
        value = {"members": sorted(members), "term": self.token}
        if not self.token:
            return False
        ok, _ = self.etcd.txn(
            [self.etcd.same_mod(self.prefix + "/term", self.token)],
            [self.etcd.put_op(key, value)],
        )
        if ok:
            log.info("in-sync set of %s: %s", self.name, value["members"] or "none")
        return ok

    def resign(self) -> None:
        """Give the leadership up at a clean stop: the slave need not wait for
        the lease to run out."""
        lease, self.lease, self.token, self.deadline_ns = self.lease, 0, 0, 0
        if lease:
            try:
                self.etcd.revoke(lease)
            except ControllerUnavailable:
                pass


class LeaseKeeper:
    """A thread that keeps a master's leadership (renewing every quarter of
    the TTL), mirrors its deadline into the store, and campaigns again when it
    was lost while this store still owns the term (a quorum outage)."""

    def __init__(
        self,
        leadership: Leadership,
        store: Any,
        in_sync: Callable[[], list[str] | None],
        on_change: Callable[[bool], None] = lambda leading: None,
    ) -> None:
        self.leadership = leadership
        self.store = store
        self.in_sync = in_sync
        self.on_change = on_change
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.was_leading = leadership.leading

    def start(self) -> LeaseKeeper:
        self._mirror()
        self._thread = threading.Thread(
            target=self._run, name="controller-lease", daemon=True
        )
        self._thread.start()
        return self

    def _mirror(self) -> None:
        self.store.state.lease_until_ns = max(1, self.leadership.deadline_ns)

    def _run(self) -> None:
        period = self.leadership.lease_ttl_s / 4
        while not self._stop.wait(period):
            lead = self.leadership
            try:
                if lead.token:
                    lead.renew(self.in_sync())
                else:
                    lead.campaign()
            except ControllerUnavailable as exc:
                lead.last_error = str(exc)
            except Exception:  # noqa: BLE001 - tried again next period
                log.exception("controller lease round failed")
            self._mirror()
            leading = lead.leading
            if leading != self.was_leading:
                self.was_leading = leading
                if leading:
                    log.warning("%s leads %s again: writes resume",
                                lead.identity, lead.name)  # fmt: skip
                else:
                    log.error(
                        "%s lost the leadership of %s (%s): no writes, timers "
                        "or check-backs until it leads again",
                        lead.identity, lead.name, lead.last_error or "lease ran out",
                    )  # fmt: skip
                try:
                    self.on_change(leading)
                except Exception:  # noqa: BLE001
                    log.exception("a leadership callback failed")

    def stop(self, resign: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if resign:
            self.leadership.resign()
        self.store.state.lease_until_ns = 1  # no writes until a new lease
