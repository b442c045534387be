"""The endpoint's settings (``serve`` flags) and its timing constants."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: How often a waiting long poll looks for appends by other processes.
APPEND_WATCH_S = 0.002
#: A long poll pops again at least this often, whatever woke it or not.
REPOLL_S = 1.0
#: On SIGTERM: how long the calls in flight get to finish once the long
#: polls have answered (Telemetry streams stay open until then, so this is
#: also what stopping with clients connected costs).
SHUTDOWN_GRACE_S = 1.0

#: How long a restarted endpoint remembers the clients its last run saw.
CLIENT_MEMORY_S = 600
#: ``clients.json`` is rewritten for changed counters alone at most this often.
COUNTERS_WRITE_S = 1.0


@dataclass
class EndpointConfig:
    host: str = "127.0.0.1"
    port: int = 8081
    #: index of this worker under ``serve --workers N``; None: the only process
    worker: int | None = None
    #: a worker's own port beside the shared one (``--worker-ports``)
    worker_port: int | None = None
    embedded_timers: bool = False
    transaction_timeout_ms: int | None = None
    check_interval_ms: int | None = None
    max_attempts: int = 17
    consumer_backoff_ms: list[int] = field(
        default_factory=lambda: [1000, 5000, 10000, 30000, 60000, 120000]
    )
    #: groups made FIFO at start (``--fifo-groups``; kept in the group registry)
    fifo_groups: set[str] = field(default_factory=set)
    #: refuse a message whose type its topic was not made for (Apache's proxy
    #: ``enableTopicMessageTypeCheck``)
    topic_type_check: bool = True
    default_invisible_ms: int = 30_000
    long_polling_ms: int = 20_000
    max_batch: int = 32
    #: auto-renewed invisibility (push consumers) ends after this long
    max_renew_ms: int = 30 * 60 * 1000
    #: Redis URL for check-backs relayed from the Celery check task; None: off
    redis_url: str | None = None
    redis_channel: str = "broker_core:grpc:check"
    #: access key -> secret key; empty: no authentication
    credentials: dict[str, str] = field(default_factory=dict)
    #: a retried send (same client message id and topic) within this window
    #: gets the first send's result and stores nothing
    dedupe_window_ms: int = 600_000
    #: a signed request's ``x-mq-date-time`` must be this close to the clock
    auth_window_s: int = 300
    #: clients' clock offsets from UTC, in minutes, that dates may carry (the
    #: clients sign *local* time with a literal Z, G12); default: UTC and this
    #: host's own zone
    auth_offsets_min: tuple[int, ...] = ()
    #: TLS port beside the plaintext one: (host:port, cert file, key file)
    tls: tuple[str, str, str] | None = None
    #: the gRPC front: "python" (grpc.aio) or "native" (``native_front.py``)
    front: str = "python"
    #: cluster membership (``broker_core.cluster.node.NodeConfig``); None: alone
    node: Any = None
    #: the admin API: (listen HOST:PORT, token, TLS (cert, key) or None)
    admin: tuple[str, str, tuple[str, str] | None] | None = None


#: Messages in one SendMessage call, and entries in one AckMessage call, at
#: most (the official clients send and ack a few at a time).
MAX_CALL_ENTRIES = 1024
