"""``python -m broker_core serve``: run the gRPC endpoint."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

from broker_core.config import DEFAULT_TIMER_MAX_DELAY_S


def default_front() -> str:
    """``$GRPC_FRONT`` when set, else ``native`` where ``make native`` built
    it (``broker_core._native`` imports), else ``python``."""
    chosen = os.environ.get("GRPC_FRONT", "")
    if chosen:
        if chosen not in ("python", "native"):
            raise SystemExit(f"GRPC_FRONT={chosen!r}: python or native")
        return chosen
    try:
        from broker_core import _native  # type: ignore[attr-defined]  # noqa: F401
    except ImportError:
        return "python"
    return "native"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, help="store directory")
    p.add_argument("--listen", default="127.0.0.1:8081", help="HOST:PORT")
    p.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("GRPC_WORKERS", "1")),
        help="endpoint processes sharing the port (SO_REUSEPORT) and the store, "
        "supervised by this one (default: $GRPC_WORKERS, else 1: this process "
        "serves)",
    )
    p.add_argument(
        "--worker-ports",
        type=int,
        default=None,
        metavar="BASE",
        help="with --workers: worker I also listens on port BASE+I on the "
        "--listen host (health checks of one worker; pinning a client to one)",
    )
    p.add_argument(
        "--front",
        choices=("python", "native"),
        default=None,
        help="what terminates gRPC: native (the C++ front built by `make "
        "native`) or python (grpc.aio); the same RPCs, in Python, either way; "
        "default: $GRPC_FRONT, else native where it is built, else python",
    )
    # Set by the supervisor for each worker it starts.
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--dedupe-window-ms",
        type=int,
        default=600_000,
        help="a retried send (same client message id) within this window gets "
        "the first result and is not stored again (default 600000; 0: off)",
    )
    p.add_argument(
        "--auth-window",
        type=int,
        default=300,
        help="seconds a signed request's date may be off the clock (default 300)",
    )
    p.add_argument(
        "--auth-offsets",
        default="",
        help="comma-separated clock offsets from UTC in minutes that clients "
        "sign with (they sign local time; default: 0 and this host's zone)",
    )
    p.add_argument(
        "--flush",
        choices=("async", "sync"),
        default=os.environ.get("BROKER_FLUSH", "async"),
        help="sync: a send is answered once its bytes are on disk; async: "
        "flushed every 500 ms (default: $BROKER_FLUSH, else async)",
    )
    p.add_argument(
        "--disk-ratio",
        type=float,
        default=float(os.environ.get("BROKER_DISK_RATIO", "0.90")),
        help="refuse sends while the store's disk is fuller than this "
        "(default: $BROKER_DISK_RATIO, else 0.90; 1 turns the guard off)",
    )
    p.add_argument(
        "--scrub-interval",
        type=int,
        default=int(os.environ.get("BROKER_SCRUB_INTERVAL", "0")),
        help="CRC-check the whole log every this many seconds in the background "
        "(default: $BROKER_SCRUB_INTERVAL, else 0: off)",
    )
    p.add_argument(
        "--max-delay-s",
        type=int,
        default=int(os.environ.get("BROKER_MAX_DELAY_S", DEFAULT_TIMER_MAX_DELAY_S)),
        help="refuse a message due more than this many seconds ahead "
        "(ILLEGAL_DELIVERY_TIME; RocketMQ's timerMaxDelaySec; default: "
        "$BROKER_MAX_DELAY_S, else 259200 = 3 days)",
    )
    p.add_argument(
        "--no-auto-create-topic",
        action="store_true",
        help="answer TOPIC_NOT_FOUND for a topic that does not exist, as Apache "
        "RocketMQ's proxy does (default: $BROKER_AUTO_CREATE_TOPIC, else 1: a "
        "topic a client names is made, NORMAL, on first use)",
    )
    p.add_argument(
        "--embedded-timers",
        action="store_true",
        help="run the transaction check and delay delivery in-process",
    )
    p.add_argument("--transaction-timeout-ms", type=int, default=None)
    p.add_argument("--check-interval-ms", type=int, default=None)
    p.add_argument(
        "--max-delivery-attempts",
        type=int,
        default=17,
        help="deliveries before a message goes to %%DLQ%%<group>",
    )
    p.add_argument(
        "--consumer-backoff-ms",
        default="1000,5000,10000,30000,60000,120000",
        help="push consumer nack delays (comma-separated ms)",
    )
    p.add_argument(
        "--fifo-groups", default="", help="comma-separated FIFO consumer groups"
    )
    p.add_argument(
        "--no-topic-type-check",
        action="store_true",
        help="accept every message type on every topic (Apache's proxy "
        "enableTopicMessageTypeCheck=false); default: a FIFO, delayed or "
        "transactional message needs a topic of that type",
    )
    p.add_argument("--long-polling-ms", type=int, default=20000)
    p.add_argument(
        "--redis-url",
        default=None,
        help="Redis for check-backs relayed from the Celery check "
        "(default: $REDIS_URL; off with --embedded-timers unless given)",
    )
    p.add_argument("--no-redis-relay", action="store_true")
    p.add_argument("--redis-channel", default="broker_core:grpc:check")
    p.add_argument("--tls-listen", default=None, metavar="HOST:PORT")
    p.add_argument("--tls-cert", default=None, help="PEM certificate chain")
    p.add_argument("--tls-key", default=None, help="PEM private key")
    g = p.add_argument_group(
        "cluster", "membership in a cluster of nodes and replication (docs/cluster.md)"
    )
    g.add_argument(
        "--cluster",
        default=os.environ.get("BROKER_CLUSTER", ""),
        help="cluster name: register this node in the route registry "
        "(default: $BROKER_CLUSTER; none: a single node)",
    )
    g.add_argument(
        "--node", default=os.environ.get("BROKER_NODE", ""), help="broker name"
    )
    g.add_argument("--broker-id", type=int, default=0, help="1+ for a slave")
    g.add_argument(
        "--role",
        choices=("ASYNC_MASTER", "SYNC_MASTER"),
        default=os.environ.get("BROKER_ROLE", "ASYNC_MASTER"),
        help="a master's role: SYNC_MASTER answers a send once a slave has it",
    )
    g.add_argument(
        "--registry",
        default=None,
        help="route registry (Redis URL; default: $REGISTRY_URL, else $REDIS_URL)",
    )
    g.add_argument(
        "--registry-expiry",
        type=float,
        default=10.0,
        help="seconds without a heartbeat before a node drops out of routes",
    )
    g.add_argument(
        "--advertise",
        default=None,
        help="HOST:PORT clients use for this node (default: --listen)",
    )
    g.add_argument(
        "--auto-promote-after",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="a slave promotes itself (ASYNC_MASTER) once its master has been "
        "out of the registry and silent on the HA link this long (0: never; "
        "an operator promotes)",
    )
    g.add_argument(
        "--controller",
        default=os.environ.get("BROKER_CONTROLLER", ""),
        metavar="URLS",
        help="etcd members (http://host:2379,...): the quorum elects the "
        "master of this name, a master writes only under its lease, and a "
        "slave of the in-sync set is promoted when the lease runs out "
        "(docs/cluster.md)",
    )
    g.add_argument(
        "--lease-ttl",
        type=int,
        default=6,
        metavar="SECONDS",
        help="with --controller: a master's lease (it stops writing after "
        "3/4 of it without a renewal)",
    )
    g.add_argument(
        "--ha-listen", default="", help="serve this master's log on HOST:PORT"
    )
    g.add_argument("--master-ha", default="", help="follow the master at HOST:PORT")
    g.add_argument("--ha-secret-file", default="", help="shared replication secret")
    g.add_argument(
        "--ha-tls-cert",
        default="",
        help="with --ha-listen: serve the HA link over TLS only, with this "
        "certificate (PEM)",
    )
    g.add_argument("--ha-tls-key", default="", help="the key of --ha-tls-cert")
    g.add_argument(
        "--ha-tls-ca",
        default="",
        help="with --master-ha: follow over TLS, trusting this CA (or "
        "self-signed) certificate",
    )
    g.add_argument(
        "--ha-tls-server-name",
        default="",
        help="the name the master's HA certificate must hold (default: the "
        "host of --master-ha)",
    )
    g.add_argument(
        "--sync-timeout",
        type=float,
        default=3.0,
        help="SYNC_MASTER: seconds a send waits for a slave, then "
        "SLAVE_PERSISTENCE_TIMEOUT",
    )
    g.add_argument(
        "--min-in-sync-replicas",
        type=int,
        default=1,
        metavar="N",
        help="a SYNC group's master stores a send or a transaction's end only "
        "with N copies in sync, its own included (else HA_NOT_AVAILABLE, "
        "nothing stored); 1: an elected master takes writes alone",
    )
    a = p.add_argument_group("admin API", "the console's way in (docs/cluster.md)")
    a.add_argument("--admin-listen", default="", help="serve the admin API here")
    a.add_argument(
        "--admin-only",
        action="store_true",
        help="serve only the admin API (no gRPC port, timers or checks), in a "
        "process of its own beside the endpoint's: the console keeps its sight "
        "of the store while the endpoint is down (not with --cluster)",
    )
    a.add_argument(
        "--admin-token-file",
        default=os.environ.get("ADMIN_TOKEN_FILE", ""),
        help="file holding the bearer token the admin API requires",
    )
    a.add_argument("--admin-tls-cert", default=None)
    a.add_argument("--admin-tls-key", default=None)
    a.add_argument(
        "--admin-advertise",
        default=None,
        help="URL the console uses for this node's admin API (default: "
        "http(s)://--admin-listen)",
    )
    p.add_argument(
        "--auth",
        action="append",
        default=[],
        metavar="AK:SK",
        help="require the client's HMAC-SHA1 signature with this access key "
        "and secret (repeatable; default: $GRPC_AUTH 'ak:sk,ak2:sk2'; none: open)",
    )


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Serve; with ``--workers`` N > 1, supervise N workers started with
    ``argv`` (the ``serve`` arguments as given)."""
    from broker_core.endpoint.server import EndpointConfig, serve
    from broker_core.logfmt import configure

    configure()  # JSON lines on stdout, as every process of the system writes
    host, _, port = args.listen.rpartition(":")
    if args.workers > 1:
        from broker_core.endpoint.workers import Supervisor

        if int(port) == 0:
            raise SystemExit("--workers needs a fixed port in --listen")
        if args.embedded_timers and args.no_redis_relay:
            logging.getLogger(__name__).warning(
                "--workers with --embedded-timers and --no-redis-relay: "
                "check-backs reach only the producers connected to worker 0"
            )
        return Supervisor(args.store, args.workers, argv).run()
    worker = args.worker
    cfg = EndpointConfig(
        host=host or "127.0.0.1",
        port=int(port),
        worker=worker,
        worker_port=None
        if worker is None or args.worker_ports is None
        else args.worker_ports + worker,
        embedded_timers=args.embedded_timers,
        front=args.front or default_front(),
        transaction_timeout_ms=args.transaction_timeout_ms,
        check_interval_ms=args.check_interval_ms,
        max_attempts=args.max_delivery_attempts,
        consumer_backoff_ms=[int(x) for x in args.consumer_backoff_ms.split(",") if x],
        fifo_groups={g for g in args.fifo_groups.split(",") if g},
        topic_type_check=not args.no_topic_type_check,
        long_polling_ms=args.long_polling_ms,
        redis_channel=args.redis_channel,
        tls=(args.tls_listen, args.tls_cert, args.tls_key)
        if args.tls_listen and args.tls_cert and args.tls_key
        else None,
        credentials=dict(
            pair.split(":", 1)
            for pair in (args.auth or os.environ.get("GRPC_AUTH", "").split(","))
            if ":" in pair
        ),
        # Embedded timers in one process need no relay; a worker does, for
        # the check-backs of worker 0 to reach producers on the others.
        redis_url=None
        if args.no_redis_relay
        else (
            args.redis_url
            or (
                None
                if args.embedded_timers and worker is None
                else os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
            )
        ),
    )
    if args.cluster:
        from broker_core.cluster.node import NodeConfig

        if not args.node:
            raise SystemExit("--cluster needs --node (this node's broker name)")
        if args.workers > 1 and (args.ha_listen or args.master_ha):
            raise SystemExit("replication (--ha-listen, --master-ha) needs --workers 1")
        if args.min_in_sync_replicas < 1:
            raise SystemExit("--min-in-sync-replicas counts the master: 1 or more")
        if bool(args.ha_tls_cert) != bool(args.ha_tls_key):
            raise SystemExit("--ha-tls-cert and --ha-tls-key go together")
        if args.ha_tls_cert and not args.ha_listen:
            raise SystemExit("--ha-tls-cert needs --ha-listen")
        if (args.ha_tls_ca or args.ha_tls_server_name) and not args.master_ha:
            raise SystemExit("--ha-tls-ca and --ha-tls-server-name need --master-ha")
        if args.ha_tls_server_name and not args.ha_tls_ca:
            raise SystemExit("--ha-tls-server-name needs --ha-tls-ca")
        cfg.node = NodeConfig(
            cluster=args.cluster,
            name=args.node,
            registry_url=args.registry
            or os.environ.get("REGISTRY_URL")
            or os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
            advertise=args.advertise or f"{cfg.host}:{cfg.port}",
            broker_id=args.broker_id,
            role=args.role,
            expiry_s=args.registry_expiry,
            ha_listen=args.ha_listen,
            master_ha=args.master_ha,
            secret_file=args.ha_secret_file,
            ha_tls_cert=args.ha_tls_cert,
            ha_tls_key=args.ha_tls_key,
            ha_tls_ca=args.ha_tls_ca,
            ha_tls_server_name=args.ha_tls_server_name,
            sync_timeout_s=args.sync_timeout,
            min_in_sync_replicas=args.min_in_sync_replicas,
            auto_promote_after_s=args.auto_promote_after,
            controller=args.controller,
            lease_ttl_s=args.lease_ttl,
        )
    elif args.ha_listen or args.master_ha or args.ha_tls_cert or args.ha_tls_ca:
        raise SystemExit(
            "replication needs cluster membership: give --cluster and --node"
        )
    if args.admin_listen:
        try:
            token = open(args.admin_token_file).read().strip()
        except OSError as exc:
            raise SystemExit(f"--admin-listen needs --admin-token-file: {exc}") from exc
        tls = (
            (args.admin_tls_cert, args.admin_tls_key)
            if args.admin_tls_cert and args.admin_tls_key
            else None
        )
        cfg.admin = (args.admin_listen, token, tls)
        if cfg.node is not None:
            scheme = "https" if tls else "http"
            cfg.node.admin = args.admin_advertise or f"{scheme}://{args.admin_listen}"
    cfg.auth_window_s = args.auth_window
    cfg.dedupe_window_ms = args.dedupe_window_ms
    cfg.auth_offsets_min = tuple(int(x) for x in args.auth_offsets.split(",") if x)
    if cfg.credentials and cfg.tls is None:
        logging.getLogger(__name__).warning(
            "--auth without --tls-listen: the signature authenticates a client "
            "but does not protect its requests, which travel in plaintext; use "
            "TLS off a trusted network"
        )
    if args.max_delay_s < 1:
        raise SystemExit("--max-delay-s must be at least 1")
    store_options = {
        "flush": args.flush,
        "disk_space_warning_ratio": args.disk_ratio,
        "scrub_interval_s": args.scrub_interval,
        "timer_max_delay_s": args.max_delay_s,
        "auto_create_topic": not args.no_auto_create_topic
        and os.environ.get("BROKER_AUTO_CREATE_TOPIC", "1") != "0",
    }
    if cfg.node is not None:
        # Message and transaction ids carry the store's host: distinct per
        # node, so that two nodes never hand out the same id.
        store_options["store_host"] = cfg.node.advertise
    if args.admin_only:
        if cfg.admin is None:
            raise SystemExit("--admin-only needs --admin-listen and --admin-token-file")
        if cfg.node is not None or args.workers > 1:
            raise SystemExit(
                "--admin-only is for a single node: a cluster member's admin "
                "API runs in its endpoint (--admin-listen)"
            )
        from broker_core.endpoint.server import serve_admin_only

        serve_admin_only(args.store, cfg, store_options=store_options)
        return 0
    asyncio.run(serve(args.store, cfg, store_options=store_options))
    return 0
