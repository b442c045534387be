"""One node of a cluster: the endpoint's membership, routes and replication.

A node is one store and its gRPC endpoint (RocketMQ 5's "local mode" proxy),
named (``--node broker-a``) in a cluster (``--cluster``). ``ClusterNode``
keeps it registered in the route registry (``registry.Heartbeat``), answers
the endpoint's route questions from the registry (cached, refreshed when a
node announces a change and at least every ``ROUTE_TTL_S``), and runs the
node's side of replication:

* a master with ``--ha-listen`` serves its log to slaves (``ha.HAServer``);
  ``SYNC_MASTER`` answers a send only once a slave has it
  (``wait_replicated``);
* a slave (``--master-ha HOST:PORT``) follows its master in-process
  (``ha.SlaveFollower``), serves reads of what it replicated, refuses writes,
  and runs no transaction check or timers;
* a slave is promoted by ``python -m broker_core promote STORE`` (or
  ``promote()``): the node notices the role file change within
  ``ROLE_POLL_S``, stops following, becomes a master (its registration says
  so at once: clients send to it again) and starts the master services (the
  check and the timers, whose state is derived from the replicated log).

One name, one master (fencing). A master registers its newest epoch
(``ha.epochs``). A store that would serve as the master of a name whose live
master has another history at least as new (a different epoch id, an epoch
number not lower: the slave promoted while this store was away) does not
start (``StaleMasterError``, saying how to rejoin as that master's slave);
a running master that finds such a master registered (a promotion forced
while it was cut off from the registry) stops taking writes and stops
registering (``fenced``), so that clients never have two masters of one name
to send to.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker_core.cluster.registry import (
    MASTER_ROLES,
    PERM_READ,
    PERM_WRITE,
    Heartbeat,
    NodeInfo,
    RouteEntry,
    RouteRegistry,
    TopicQueues,
)
from broker_core.errors import StaleMasterError

log = logging.getLogger(__name__)


ROUTE_TTL_S = 1.0
#: how long a node that takes no writes forwards to the master it last saw in
#: the registry while the registry does not answer
LAST_MASTER_S = 60.0
ROLE_POLL_S = 0.5
#: how long a SYNC group's master running ASYNC holds appends for a slave
#: that is near its log end to reach it (``_join_sync``)
JOIN_WAIT_S = 0.3


@dataclass
class NodeConfig:
    cluster: str
    name: str
    registry_url: str
    #: "host:port" the clients use for this node (routes carry it)
    advertise: str
    broker_id: int = 0
    role: str = "ASYNC_MASTER"
    expiry_s: float = 10.0
    #: "host:port" to serve this master's log to slaves on; empty: none
    ha_listen: str = ""
    #: a slave's master HA address
    master_ha: str = ""
    secret_file: str = ""
    #: a master's HA certificate and key (PEM): its HA port speaks TLS only
    ha_tls_cert: str = ""
    ha_tls_key: str = ""
    #: a slave's CA for its master's HA certificate: it follows over TLS
    ha_tls_ca: str = ""
    #: the name the master's certificate must hold (default: its host)
    ha_tls_server_name: str = ""
    #: SYNC_MASTER: how long a send waits for a slave
    sync_timeout_s: float = 3.0
    admin: str = ""
    #: a slave promotes itself once its master has been gone this long (0: no)
    auto_promote_after_s: float = 0.0
    #: etcd members ("http://host:2379,..."): the quorum decides who is
    #: master (``cluster.controller``); empty: the registry alone
    controller: str = ""
    #: the controller lease of a master, seconds
    lease_ttl_s: int = 6
    #: copies (the master's own included) a SYNC group's master must have in
    #: sync before it stores a send or a transaction's end (RocketMQ's
    #: ``minInSyncReplicas``); 1: an elected master takes writes alone
    min_in_sync_replicas: int = 1


class ClusterNode:
    """Membership, routes and replication of one endpoint (module doc)."""

    def __init__(self, store: Any, cfg: NodeConfig) -> None:
        from broker_core.ha.role import Role, read_role

        self.store = store  # the node's MessageStore
        self.cfg = cfg
        self.registry = RouteRegistry(cfg.registry_url, cfg.cluster, cfg.expiry_s)
        self.started_ms = int(time.time() * 1000)
        self.ha_server: Any = None
        self.follower: Any = None
        self._secret = b""
        self._tls_server: Any = None
        self._tls_client: Any = None
        if cfg.ha_listen or cfg.master_ha:
            from broker_core.ha.protocol import read_secret
            from broker_core.ha.tls import client_context, server_context

            if not cfg.secret_file:
                raise ValueError("replication needs --ha-secret-file")
            self._secret = read_secret(cfg.secret_file)
            # Read at start, so that a bad file stops the node at once.
            if cfg.ha_tls_cert and cfg.ha_listen:
                self._tls_server = server_context(cfg.ha_tls_cert, cfg.ha_tls_key)
            if cfg.ha_tls_ca and cfg.master_ha:
                self._tls_client = client_context(cfg.ha_tls_ca)
        recorded = read_role(store.root)
        if cfg.master_ha and _promoted(recorded):
            # Promoted earlier: a master now, whatever the start flags say.
            log.warning(
                "%s was promoted (config/role.json): not following %s",
                store.root, cfg.master_ha,
            )  # fmt: skip
            cfg.master_ha = ""
        if not cfg.master_ha and recorded["role"] == Role.SLAVE.value:
            raise ValueError(
                f"{store.root} is a slave's store (config/role.json): give "
                "--master-ha, or promote it first (python -m broker_core promote)"
            )
        self._role = ""
        self._role_lock = threading.Lock()
        self.refresh_role()
        if cfg.master_ha:
            # A slave from the first request on (start() writes the file).
            self._role = Role.SLAVE.value
        self._routes: dict[str, tuple[float, list[RouteEntry]]] = {}
        #: the master of this name last seen elsewhere (``master_elsewhere``),
        #: and when the registry last failed to answer
        self._last_master: tuple[float, NodeInfo] | None = None
        self._registry_failed_at = -1e9
        self._nodes_cache: tuple[float, list[NodeInfo]] = (0.0, [])
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._unsubscribe: Callable[[], None] | None = None
        self.on_promoted: list[Callable[[], None]] = []
        #: why this master stopped taking writes (another master of its name
        #: with a newer history), or ""
        self.fenced = ""
        #: since when (monotonic) the master looks gone (auto promotion)
        self._master_gone_since: float | None = None
        self.auto_promoted = False
        self.heartbeat = Heartbeat(
            self.registry, self.describe, allow=self._may_register
        )
        self._role_thread: threading.Thread | None = None
        self.leadership: Any = None
        self.keeper: Any = None
        #: under a controller: the in-sync set as published in etcd (a SYNC
        #: send waits for every member), and the highest log end acknowledged
        #: to a client; a slave joins the set only once it has that much
        self._isr_lock = threading.Lock()
        self.isr: set[str] = set()
        #: the in-sync set waited on but not yet in etcd (its write failed)
        self._isr_unpublished = False
        self.acked_hw = 0
        #: the log's end at the last in-sync round (ASYNC: acknowledged since)
        self._round_end = 0
        if cfg.controller:
            from broker_core.cluster.controller import Etcd, Leadership

            self.leadership = Leadership(
                Etcd.from_url(cfg.controller), cfg.cluster, cfg.name,
                self.identity, cfg.lease_ttl_s,
                describe=lambda: {"advertise": cfg.advertise, "ha": cfg.ha_listen},
                configured_sync=cfg.role == "SYNC_MASTER",
            )  # fmt: skip

    # -- role ------------------------------------------------------------------
    @property
    def role(self) -> str:
        """The store's role (``config/role.json``), as last read: at start,
        every ``ROLE_POLL_S`` and at promotion; sends ask it on the event
        loop, so it is not read from disk each time."""
        return self._role

    def refresh_role(self) -> str:
        from broker_core.ha.role import read_role

        # Under the role lock: a read of the file from before a switch must
        # not overwrite the role the switch set (``_join_sync``).
        with self._role_lock:
            self._role = str(read_role(self.store.root)["role"])
            return self._role

    @property
    def is_master(self) -> bool:
        return self.role in MASTER_ROLES

    @property
    def identity(self) -> str:
        """This store in the controller: ``<name>/<broker id>@<address>``."""
        return f"{self.cfg.name}/{self.cfg.broker_id}@{self.cfg.advertise}"

    @property
    def may_act(self) -> bool:
        """Whether this node may take writes, deliver timers and send
        check-backs: a master, not fenced, and under a controller leading."""
        if not self.is_master or self.fenced:
            return False
        return self.leadership is None or self.leadership.leading

    @property
    def sync(self) -> bool:
        # A SYNC_MASTER without an HA server has no slave: its writes fail
        # (``wait_replicated``), never acknowledged on one copy.
        return self.role == "SYNC_MASTER"

    # -- one master per name -----------------------------------------------------
    def _epoch(self) -> tuple[int, str]:
        from broker_core.ha.epochs import read_epochs

        eps = read_epochs(self.store.root)
        return (eps[-1].epoch, eps[-1].id) if eps else (0, "")

    def newer_master(self) -> NodeInfo | None:
        """The live master of this node's name with another history at least
        as new as this store's (None: none, or it is this store's own entry).
        Raises what the registry raises when it does not answer."""
        live = self.registry.find(self.cfg.name, 0)
        if live is None or not live.is_master or not live.epoch_id:
            return None
        epoch, ident = self._epoch()
        if live.epoch_id == ident or live.epoch < epoch:
            return None
        return live

    def check_not_stale(self) -> None:
        """Before a store serves as a master: refuse to be a second master of
        its name (``StaleMasterError``). A registry that does not answer
        cannot tell: logged, and the node starts."""
        if self.cfg.master_ha:
            return
        if self.leadership is not None:
            # The quorum decides; the registry's soft state (a dead master's
            # registration not yet expired) must not refuse its choice.
            self._check_controller()
            return
        try:
            live = self.newer_master()
        except Exception as exc:  # noqa: BLE001 - Redis away: cannot tell
            log.warning("route registry unreachable (%s): cannot check that no "
                        "other master of %s is live", exc, self.cfg.name)  # fmt: skip
            return
        if live is None:
            return
        follow = f" --master-ha {live.ha}" if live.ha else " --master-ha MASTER:PORT"
        raise StaleMasterError(
            f"{self.cfg.name} already has a live master, {live.key} at "
            f"{', '.join(live.endpoints) or '?'} (epoch {live.epoch}; this store's "
            f"newest is {self._epoch()[0]}): this store was its master before a "
            f"failover. Start it as that master's slave ({follow.strip()} "
            "--broker-id 1): its epochs then cut what the new master never had"
        )

    def _check_controller(self) -> None:
        """Before serving as a master under a controller: lead, or refuse to
        start when another store leads or led since (``StaleMasterError``).
        With no quorum the node starts without a lease: it takes no writes
        until it wins one."""
        from broker_core.cluster.controller import ControllerUnavailable

        lead = self.leadership
        try:
            if lead.campaign(as_slave=False):
                return
        except ControllerUnavailable as exc:
            log.error("controller unreachable (%s): serving without a lease, "
                      "no writes until it leads", exc)  # fmt: skip
            return
        raise StaleMasterError(
            f"the controller refuses {self.identity} as master: {lead.last_error}"
        )

    def _may_register(self) -> bool:
        """Before each heartbeat of a master: fence it (no writes, no
        registration) if another master of its name has a newer history."""
        if self.fenced:
            return False
        if not self.is_master:
            return True
        if self.leadership is not None:
            # No lease: clients must not route here. The quorum, not the
            # registry, decides who is master.
            return bool(self.leadership.leading)
        try:
            live = self.newer_master()
        except Exception:  # noqa: BLE001 - the registration fails and says so
            return True
        if live is None:
            return True
        self.fenced = (
            f"{live.key} at {', '.join(live.endpoints) or '?'} is the master of "
            f"{self.cfg.name} with a newer history (epoch {live.epoch})"
        )
        # Client appends refused from now on, in every process of the store.
        self.store.replica = True
        log.error("fenced: %s; this store takes no more writes and leaves the "
                  "routes: restart it as that master's slave", self.fenced)  # fmt: skip
        return False

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> ClusterNode:
        if self.cfg.master_ha:
            from broker_core.ha.slave import SlaveFollower

            self.follower = SlaveFollower(
                self.store, self.cfg.master_ha, self._secret,
                self.cfg.cluster, self.cfg.name, tls=self._tls_client,
                server_name=self.cfg.ha_tls_server_name or None,
                node=self.identity,
            ).start()  # fmt: skip
        else:
            if self.store.replica:
                # Fenced in an earlier run (``_may_register``); no newer master
                # of this name is live now (``check_not_stale``).
                log.warning(
                    "%s: lifting the fence of an earlier run: no other master "
                    "of %s is live", self.store.root, self.cfg.name,
                )  # fmt: skip
                self.store.replica = False
            if self.leadership is None:
                self.store.state.lease_until_ns = 0  # no controller: no lease
            self._become_master_services()
        self.refresh_role()
        self.heartbeat.start()
        try:
            self._unsubscribe = self.registry.subscribe(lambda _m: self.invalidate())
        except Exception as exc:  # noqa: BLE001 - registry away: poll only
            log.warning("registry events unavailable (routes re-read every "
                        "%.0f s): %s", ROUTE_TTL_S, exc)  # fmt: skip
        self._role_thread = threading.Thread(
            target=self._watch_role, name="cluster-role", daemon=True
        )
        self._role_thread.start()
        return self

    def _become_master_services(self) -> None:
        from broker_core.ha.master import HAServer
        from broker_core.ha.role import Role, read_role, write_role

        recorded = read_role(self.store.root)
        wanted = self.cfg.role if self.cfg.role in MASTER_ROLES else "ASYNC_MASTER"
        if recorded["role"] not in MASTER_ROLES or (
            recorded["role"] != wanted and not _promoted(recorded)
        ):
            write_role(self.store.root, Role(wanted))
        self.refresh_role()
        if self.cfg.ha_listen and self.ha_server is None:
            self.ha_server = HAServer(
                self.store, self.cfg.ha_listen, self._secret,
                self.cfg.cluster, self.cfg.name, tls=self._tls_server,
            ).start()  # fmt: skip
        if self.leadership is not None and self.keeper is None:
            from broker_core.cluster.controller import LeaseKeeper

            def changed(leading: bool) -> None:
                if leading:
                    self._load_isr()
                    self.heartbeat.beat()  # back in the routes at once

            self._load_isr()
            self.keeper = LeaseKeeper(
                self.leadership, self.store, self._isr_round, changed
            ).start()

    # -- the in-sync set (controller) ----------------------------------------------
    def _load_isr(self) -> None:
        """On taking the lead: the in-sync set of this term as etcd has it
        (none in a new term), and every record in the log counted as
        acknowledged (after a restart nobody knows what was)."""
        from broker_core.cluster.controller import ControllerUnavailable

        lead = self.leadership
        try:
            members, term = lead.in_sync()
        except ControllerUnavailable:
            members, term = [], 0
        with self._isr_lock:
            self.isr = set(members) if term == lead.token else set()
            self.acked_hw = max(self.acked_hw, self.store.max_physical_offset())

    def _isr_round(self) -> None:
        """At each lease renewal: drop the members that fell behind and add
        the slaves that caught up, etcd first (a member is electable: the set
        this master waits on is never larger than the published one)."""
        from broker_core.cluster.controller import ISR_WINDOW_S, ControllerUnavailable

        ha, lead = self.ha_server, self.leadership
        if lead is None or not lead.leading:
            return None
        # A SYNC group keeps in the set only slaves that had the whole log
        # within the send timeout: a stalled one leaves it within a round or
        # two, not after ten seconds (timer deliveries wait for no slave).
        window = min(ISR_WINDOW_S, max(1.0, self.cfg.sync_timeout_s))
        if not (self.sync or lead.sync):
            window = ISR_WINDOW_S
        fresh = set(ha.in_sync(window)) if ha is not None else set()
        acked = ha.acked_by_node() if ha is not None else {}
        if ha is not None and lead.sync and not self.sync:
            # A SYNC group's elected slave, taking writes alone.
            near = {n for n in fresh if acked.get(n, -1) >= self._round_end}
            self._round_end = self.store.max_physical_offset()
            if near:
                self._join_sync(near)
            return None
        with self._isr_lock:
            if not self.sync:
                # ASYNC group: everything appended before the last round was
                # acknowledged to someone; a slave joins only holding it all.
                self.acked_hw = max(self.acked_hw, self._round_end)
                self._round_end = self.store.max_physical_offset()
            keep = self.isr & fresh
            join = {n for n in fresh - self.isr if acked.get(n, -1) >= self.acked_hw}
            want = keep | join
            if want != self.isr or self._isr_unpublished:
                try:
                    if lead.write_in_sync(sorted(want)):
                        self.isr = want
                        self._isr_unpublished = False
                except ControllerUnavailable as exc:
                    lead.last_error = str(exc)
        return None

    def _join_sync(self, near: set[str]) -> None:
        """An elected slave of a SYNC group runs ASYNC while no slave is in
        sync with it (it takes writes alone, as RocketMQ 5's controller mode
        with one in-sync replica); once one is, the group is SYNC again, so a
        later failover loses no acknowledged message either.

        Under ASYNC every append was acknowledged at once, so a slave is in
        sync only holding the whole log. With appends held (briefly: the slave
        was already near the end), the slave must hold the log's end; then
        this master is SYNC before any further append, and only then is the
        slave published in etcd (electable). The other way round, a failover
        between publishing and switching elected a slave without the last
        acknowledged messages."""
        from broker_core.cluster.controller import ControllerUnavailable
        from broker_core.ha.role import Role, read_role, write_role

        ha, lead = self.ha_server, self.leadership
        have: set[str] = set()
        with self.store.exclusive_appends():
            end = self.store.max_physical_offset()
            ha.wait_nodes(near, end, JOIN_WAIT_S)
            acked = ha.acked_by_node()
            have = {n for n in near if acked.get(n, -1) >= end}
            if not have:
                return  # not there yet: the next round tries again
            record = read_role(self.store.root)
            extra = {k: v for k, v in record.items() if k not in ("role", "since")}
            with self._role_lock, self._isr_lock:
                write_role(self.store.root, Role.SYNC_MASTER, **extra)
                self._role = Role.SYNC_MASTER.value
                # Waited on from the next append; electable once in etcd.
                self.isr = have
                self._isr_unpublished = True
                self.acked_hw = max(self.acked_hw, end)
        with self._isr_lock:
            try:
                if lead.write_in_sync(sorted(self.isr)):
                    self._isr_unpublished = False
            except ControllerUnavailable as exc:
                lead.last_error = str(exc)  # the next round writes it
        log.warning(
            "%s is SYNC again: %s in sync with this master (log end %d)",
            self.cfg.name, ", ".join(sorted(have)), end,
        )  # fmt: skip

    def _write_ha_status(self, follower: Any = None) -> None:
        """The follower's status (this node's, by default) in
        ``STORE/ha/status.json``, as ``replicate`` writes it (read by
        ``ha-status``; ``promote`` waits on it)."""
        from broker_core.ha.cli import STATUS_FILE
        from broker_core.metadata import atomic_write_json

        follower = follower or self.follower
        if follower is None:
            return
        try:
            atomic_write_json(self.store.root / STATUS_FILE, follower.status())
        except Exception as exc:  # noqa: BLE001 - a full disk: logged once a poll
            log.warning("ha/status.json not written: %s", exc)

    def _watch_role(self) -> None:
        polls = 0
        while not self._stop.wait(ROLE_POLL_S):
            self.refresh_role()
            polls += 1
            if polls % 2 == 0:
                self._write_ha_status()
            if self.follower is not None and self.is_master:
                self._promoted()
            elif self.follower is not None and self.leadership is not None:
                try:
                    self._controller_promote()
                except Exception:  # noqa: BLE001 - retried on the next poll
                    log.exception("controller promotion check failed")
            elif self.follower is not None and self.cfg.auto_promote_after_s > 0:
                try:
                    self._auto_promote()
                except Exception:  # noqa: BLE001 - retried on the next poll
                    log.exception("automatic promotion check failed")

    def _master_gone(self) -> bool:
        """Whether this slave's master is gone as far as it can tell: it was
        followed in this run, no live master of its name is in the registry
        (which answers), and nothing is heard on the HA link."""
        follower = self.follower
        if follower is None or follower.connects == 0:
            # Never followed it in this run: a cluster starting cold (the
            # slave before its master) is not a master gone.
            return False
        silent = time.time() - float(follower.last_heard_at or 0)
        if follower.connected and silent < self.cfg.auto_promote_after_s:
            return False  # heard from it: no need to ask the registry
        return self.registry.find(self.cfg.name, 0) is None

    def _auto_promote(self) -> None:
        """Promote this slave once its master has been gone for
        ``auto_promote_after_s`` (``--auto-promote-after``). One slave of a
        name does it: the first to take the registry's promotion lock (kept
        for a few expiries, so that a second slave does not follow within
        them). The old master, should it come back, finds the newer epoch in
        the registry and does not serve (``check_not_stale``, fencing)."""
        now = time.monotonic()
        try:
            gone = self._master_gone()
        except Exception:  # noqa: BLE001 - the registry cannot tell: wait
            self._master_gone_since = None
            return
        if not gone:
            self._master_gone_since = None
            return
        if self._master_gone_since is None:
            self._master_gone_since = now
            log.warning("master of %s gone: promoting in %.0f s unless it returns",
                        self.cfg.name, self.cfg.auto_promote_after_s)  # fmt: skip
            return
        if now - self._master_gone_since < self.cfg.auto_promote_after_s:
            return
        lock = f"{self.registry.prefix}:promote:{self.cfg.name}"
        hold = max(30, int(3 * self.cfg.expiry_s))
        me = f"{self.cfg.name}:{self.cfg.broker_id}@{self.cfg.advertise}"
        if not self.registry.redis.set(lock, me, nx=True, ex=hold):
            return  # another slave of this name is promoting
        log.warning("master of %s gone for %.1f s: promoting this slave",
                    self.cfg.name, now - self._master_gone_since)  # fmt: skip
        self.promote("ASYNC_MASTER")
        self.auto_promoted = True

    def _controller_promote(self) -> None:
        """Under a controller: once no store holds the leader key (the
        master's lease ran out), a slave of the term's in-sync set that
        followed the master in this run campaigns, and promotes itself if the
        quorum elects it."""
        from broker_core.cluster.controller import ControllerUnavailable

        follower, lead = self.follower, self.leadership
        if follower is None or follower.connects == 0:
            return  # a cluster starting cold: not a master gone
        try:
            if lead.leader() is not None:
                return
            if not lead.campaign(as_slave=True):
                log.warning("not promoted: %s", lead.last_error)
                return
        except ControllerUnavailable as exc:
            log.warning("controller unreachable: no promotion (%s)", exc)
            return
        log.warning("the controller elected this slave master of %s", self.cfg.name)
        self.promote("ASYNC_MASTER")
        self.auto_promoted = True

    def promote(self, role: str = "SYNC_MASTER") -> None:
        """Promote this slave here (the CLI's ``promote`` does the same from
        outside through the role file)."""
        from broker_core.ha.role import Role

        if self.follower is None:
            raise ValueError("this node is not a slave")
        self.follower.promote(Role(role))
        self.refresh_role()
        self._promoted()

    def _promoted(self) -> None:
        with self._lock:
            follower, self.follower = self.follower, None
        if follower is None:
            return
        follower.stop()
        self._write_ha_status(follower)  # following no more: ``promote`` waits
        log.warning("node %s promoted to %s", self.cfg.name, self.role)
        self.cfg.master_ha = ""
        self._become_master_services()
        self.heartbeat.beat()
        for callback in self.on_promoted:
            try:
                callback()
            except Exception:  # noqa: BLE001
                log.exception("a promotion callback failed")

    def close(self) -> None:
        self._stop.set()
        if self.keeper is not None:
            self.keeper.stop(resign=True)
        if self._unsubscribe is not None:
            self._unsubscribe()
        self.heartbeat.stop(unregister=True)
        if self.follower is not None:
            self.follower.stop()
        if self.ha_server is not None:
            self.ha_server.stop()

    # -- registration ------------------------------------------------------------
    def describe(self) -> NodeInfo:
        """This node as the registry should see it now."""
        store = self.store
        topics = {}
        for t in store.list_topics():
            perm = int(getattr(t, "perm", PERM_READ | PERM_WRITE) or 0)
            topics[t.topic_name] = TopicQueues(
                t.read_queue_nums, t.write_queue_nums, perm or PERM_READ | PERM_WRITE
            )
        role = self.role
        status = self.follower.status() if self.follower is not None else {}
        epoch, epoch_id = self._epoch()
        return NodeInfo(
            cluster=self.cfg.cluster,
            name=self.cfg.name,
            broker_id=0 if role in MASTER_ROLES else max(1, self.cfg.broker_id),  # noqa: E501
            role=role,
            endpoints=[self.cfg.advertise],
            admin=self.cfg.admin,
            ha=self.cfg.ha_listen if self.ha_server is not None else "",
            topics=topics,
            log_end=store.max_physical_offset(),
            master_log_end=int(status.get("master_offset") or 0),
            started_ms=self.started_ms,
            epoch=epoch,
            epoch_id=epoch_id,
            cut_tails=[
                {
                    k: c.get(k)
                    for k in (
                        "from",
                        "to",
                        "messages",
                        "client_messages",
                        "cut_at_ms",
                        "file",
                    )
                }  # fmt: skip
                for c in self._cut_tails()[:5]
            ],
            slaves=[
                {
                    k: s.get(k)
                    for k in (
                        "node",
                        "address",
                        "lag_bytes",
                        "stalled_s",
                        "connected",
                        "disconnected_ms",
                    )
                }  # fmt: skip
                for s in (
                    self.ha_server.replication_status(gone=True)
                    if self.ha_server is not None
                    else []
                )
            ],
        )

    # -- routes ------------------------------------------------------------------
    def invalidate(self) -> None:
        with self._lock:
            self._routes.clear()
            self._nodes_cache = (0.0, [])

    def nodes(self) -> list[NodeInfo]:
        now = time.monotonic()
        with self._lock:
            at, nodes = self._nodes_cache
        if now - at < ROUTE_TTL_S and nodes:
            return nodes
        nodes = self.registry.nodes()
        with self._lock:
            self._nodes_cache = (now, nodes)
        return nodes

    def route(self, topic: str) -> list[RouteEntry]:
        """The cluster's queues of ``topic`` (may be empty: unknown topic)."""
        now = time.monotonic()
        with self._lock:
            cached = self._routes.get(topic)
        if cached is not None and now - cached[0] < ROUTE_TTL_S:
            return cached[1]
        entries = self.registry.route(topic, self.nodes())
        with self._lock:
            self._routes[topic] = (now, entries)
        return entries

    def master_elsewhere(self) -> NodeInfo | None:
        """The live master of this node's broker name when it is another node
        (by address): where a write that reached this node belongs while it
        takes none (a slave, a fenced or lease-less old master). None: no such
        master is registered, or the registry does not answer."""
        now = time.monotonic()
        last = self._last_master
        if now - self._registry_failed_at < ROUTE_TTL_S:
            # The registry failed a moment ago: not asked again per call (each
            # try waits out its socket timeout); the master last seen stands.
            return last[1] if last and now - last[0] < LAST_MASTER_S else None
        try:
            serving = self.registry.serving(self.nodes()).get(self.cfg.name)
        except Exception as exc:  # noqa: BLE001 - registry away
            log.debug("route registry unavailable: %s", exc)
            self._registry_failed_at = now
            return last[1] if last and now - last[0] < LAST_MASTER_S else None
        if (
            serving is None
            or not serving.is_master
            or not serving.endpoints
            or self.cfg.advertise in serving.endpoints
        ):
            self._last_master = None
            return None
        self._last_master = (now, serving)
        return serving

    def announce(self) -> None:
        """Register now (a topic was created here): routes elsewhere follow."""
        self.heartbeat.beat()
        self.invalidate()

    # -- replication ---------------------------------------------------------------
    def replicas_short(self) -> str | None:
        """Why this master must refuse a write before storing it: a SYNC group
        (a SYNC_MASTER, or under a controller a group whose term is SYNC)
        with fewer than ``min_in_sync_replicas`` copies in sync, the master's
        own included (RocketMQ's IN_SYNC_REPLICAS_NOT_ENOUGH). None: enough,
        or no minimum is set."""
        want = self.cfg.min_in_sync_replicas
        if want <= 1:
            return None
        from broker_core.cluster.controller import ISR_WINDOW_S

        lead = self.leadership
        if lead is not None:
            if not (lead.sync or self.sync):
                return None
            with self._isr_lock:
                have = 1 + len(self.isr)
        elif self.sync:
            ha = self.ha_server
            have = 1 + (len(ha.in_sync(ISR_WINDOW_S)) if ha is not None else 0)
        else:
            return None
        if have >= want:
            return None
        return (
            f"{self.cfg.name} has {have} of the {want} in-sync copies "
            "--min-in-sync-replicas asks for: nothing was stored, try again"
        )

    def visible_end(self) -> int | None:
        """How far consumers may read on a SYNC master under the controller:
        the log end every member of the in-sync set has (Kafka's high
        watermark). A message a timer delivered (or anything else stored
        without waiting for the slaves) is handed out only once an
        electable slave holds it, so a failover never delivers it again.
        None: no limit (ASYNC, no controller, or nobody in the set: then no
        slave is electable and nothing can be delivered twice)."""
        ha = self.ha_server
        if self.leadership is None or ha is None or not self.sync:
            return None
        with self._isr_lock:
            members = set(self.isr)
        if not members:
            return None
        acked = ha.acked_by_node()
        return min(acked.get(n, -1) for n in members)

    def _shrink_isr(self, keep: set[str], members: set[str]) -> bool:
        """Publish the smaller in-sync set ``keep`` (the caller holds
        ``_isr_lock``); False, and kept as it is, when etcd has no quorum or
        the term is no longer this node's (then nothing is acknowledged)."""
        from broker_core.cluster.controller import ControllerUnavailable

        lead = self.leadership
        try:
            if lead is None or not lead.write_in_sync(sorted(keep)):
                return False
        except ControllerUnavailable:
            return False
        log.warning(
            "in-sync set of %s shrunk to %s: %s did not confirm within %.1f s",
            self.cfg.name, sorted(keep) or "none", sorted(members - keep),
            self.cfg.sync_timeout_s,
        )  # fmt: skip
        self.isr = keep
        return True

    def wait_replicated(self, offset: int) -> bool:
        """For SYNC_MASTER: whether a slave has the log up to ``offset`` within
        the node's sync timeout. Under a controller: every slave of the
        published in-sync set (at least one); one that does not confirm in
        time is first removed from the set in etcd, so that no slave lacking
        an acknowledged message can be elected."""
        if self.ha_server is None:
            return False  # no slave can follow a master without --ha-listen
        if self.leadership is None:
            return bool(self.ha_server.wait_replicated(offset, self.cfg.sync_timeout_s))

        ha = self.ha_server
        deadline = time.monotonic() + self.cfg.sync_timeout_s
        while True:
            with self._isr_lock:
                members = set(self.isr)
            if not members:
                return False  # no in-sync slave yet
            ha.wait_nodes(members, offset, max(0.0, deadline - time.monotonic()))
            with self._isr_lock:
                if self.isr != members:
                    if time.monotonic() < deadline:
                        continue  # the set changed meanwhile: wait on the new one
                    return False
                acked = ha.acked_by_node()
                have = {n for n in members if acked.get(n, -1) >= offset}
                if have != members:
                    if not have:
                        # Nobody confirmed: the set is emptied first, so that
                        # no slave lacking this append (or a timer delivery
                        # consumers may already have read) can be elected; a
                        # member rejoins once it holds everything
                        # (``_isr_round``). It stayed electable for the 10 s
                        # window: a recall and a consumed delivery were lost
                        # on failover (an outside trial).
                        self._shrink_isr(set(), members)
                        return False
                    if not self._shrink_isr(have, members):
                        return False
                self.acked_hw = max(self.acked_hw, offset)
                return True

    def status(self) -> dict[str, Any]:
        return {
            "cluster": self.cfg.cluster,
            "node": self.cfg.name,
            "role": self.role,
            "registry_error": self.heartbeat.last_error,
            "slaves": (
                self.ha_server.replication_status(gone=True) if self.ha_server else []
            ),
            "following": self.follower.status() if self.follower else None,
            "epoch": self._epoch()[0],
            "fenced": self.fenced or None,
            "auto_promote_after_s": self.cfg.auto_promote_after_s or None,
            "auto_promoted": self.auto_promoted,
            "controller": self._controller_status(),
            "isr": sorted(self.isr) if self.leadership is not None else None,
            "cut_tails": self._cut_tails(),
        }

    def _cut_tails(self) -> list[dict[str, Any]]:
        """The tails this store cut on rejoining as a slave, newest first
        (``ha.replica.keep_cut_tail``): ASYNC loss, with where the ids are."""
        from broker_core.ha.replica import cut_tails

        try:
            return cut_tails(self.store.root)[:20]
        except OSError:
            return []

    def _controller_status(self) -> dict[str, Any] | None:
        lead = self.leadership
        if lead is None:
            return None
        left = (lead.deadline_ns - time.monotonic_ns()) / 1e9
        return {
            "identity": lead.identity,
            "leading": lead.leading,
            "term": lead.token or None,
            "lease_left_s": round(left, 2) if lead.leading else None,
            "group_mode": ("SYNC" if lead.sync else "ASYNC") if lead.token else None,
            "error": lead.last_error or None,
        }


def _promoted(role_record: dict[str, Any]) -> bool:
    """Whether a role record is a promoted slave's (a master for good)."""
    return bool(role_record.get("promoted")) or "promoted_at_offset" in role_record
