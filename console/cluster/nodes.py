"""The console's way to the nodes of a cluster: nodes from the route
registry, everything else through each node's operations
(``broker_core.cluster.node_ops.NodeOperations``, sent by ``RemoteNodeOps``
to the node's admin API).

Settings: ``BROKER_CLUSTER`` (the cluster's name; empty: no cluster page),
``REGISTRY_URL`` (the route registry's Redis, default ``REDIS_URL``),
``CLUSTER_ADMIN_TOKEN_FILE`` (the nodes' admin token),
``CLUSTER_ADMIN_HOSTS`` (the hosts the token may be sent to; empty: any),
``CLUSTER_ADMIN_TIMEOUT_S`` and ``CLUSTER_ADMIN_WRITE_TIMEOUT_S``.

Every failure to reach a node is ``NodeUnavailableError`` (``status``: the
HTTP status the node answered, None when it did not answer); what the node
refuses is the library's own ``BrokerError``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from django.conf import settings

from broker_core.cluster.node_ops import (
    NodeOperations,
    NodeUnavailableError,
    RemoteNodeOps,
    check_host,
)
from broker_core.errors import BrokerError

#: One admin read's timeout (``CLUSTER_ADMIN_TIMEOUT_S`` overrides it).
TIMEOUT_S = 5.0
#: One admin write's (``CLUSTER_ADMIN_WRITE_TIMEOUT_S`` overrides it).
WRITE_TIMEOUT_S = 30.0
#: Calls made at once (a node's reads and every node's); more wait for a
#: free thread, within the same total wait.
MAX_PARALLEL = 32

#: A read of ``ask_nodes``: what to ask of one node's operations.
Read = Callable[[NodeOperations], Any]


def enabled() -> bool:
    return bool(getattr(settings, "BROKER_CLUSTER", ""))


def registry() -> Any:
    from broker_core.cluster import RouteRegistry

    url = getattr(settings, "REGISTRY_URL", "") or settings.REDIS_URL
    return RouteRegistry(url, settings.BROKER_CLUSTER)


def find(name: str, broker_id: int | None = None) -> Any:
    """A live node from the registry (None: not registered); a registry that
    does not answer is a ``NodeUnavailableError`` saying so."""
    try:
        return registry().find(name, broker_id)
    except Exception as exc:  # noqa: BLE001 - redis errors, a bad URL
        raise NodeUnavailableError(f"route registry: {exc}") from exc


def live_node(node: str) -> Any:
    """The live node named ``name`` (its serving node) or ``name:broker_id``."""
    name, _, bid = node.partition(":")
    try:
        target = find(name, int(bid)) if bid else find(name)
    except ValueError:
        target = None
    if target is None:
        raise NodeUnavailableError(f"{node} is not a live node")
    return target


def live_master(node: str) -> Any:
    """The live node ``node``, refused unless it is a master."""
    target = live_node(node)
    if not target.is_master:
        raise NodeUnavailableError(f"{node} has no live master")
    return target


def timeout_s() -> float:
    """One admin read's timeout: ``CLUSTER_ADMIN_TIMEOUT_S`` or 5 s."""
    return float(getattr(settings, "CLUSTER_ADMIN_TIMEOUT_S", TIMEOUT_S) or TIMEOUT_S)


def write_timeout_s() -> float:
    """One admin write's timeout (a promotion stops a follower that may be
    stuck connecting to a dead master): ``CLUSTER_ADMIN_WRITE_TIMEOUT_S``."""
    value = getattr(settings, "CLUSTER_ADMIN_WRITE_TIMEOUT_S", WRITE_TIMEOUT_S)
    return float(value or WRITE_TIMEOUT_S)


def admin_hosts() -> list[str]:
    """``CLUSTER_ADMIN_HOSTS``: host names, addresses or networks the token
    may be sent to (empty: any)."""
    return list(getattr(settings, "CLUSTER_ADMIN_HOSTS", []) or [])


def check_admin_host(base: str) -> None:
    """Refuse (``NodeUnavailableError``) an admin URL outside
    ``CLUSTER_ADMIN_HOSTS``. A node registers its admin URL in the registry:
    whoever can write there could otherwise collect the cluster's token.
    ``RemoteNodeOps`` checks it again before every call."""
    check_host(base, admin_hosts())


def _token() -> str:
    path = getattr(settings, "CLUSTER_ADMIN_TOKEN_FILE", "")
    if not path:
        raise NodeUnavailableError("CLUSTER_ADMIN_TOKEN_FILE is not set")
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise NodeUnavailableError(f"CLUSTER_ADMIN_TOKEN_FILE: {exc}") from exc
    if not token:
        raise NodeUnavailableError("CLUSTER_ADMIN_TOKEN_FILE holds no token")
    return token


def remote_node_ops(base: str) -> RemoteNodeOps:
    """The operations of the node whose admin API is at ``base``: the token
    of ``CLUSTER_ADMIN_TOKEN_FILE``, a read's and a write's timeouts, the
    hosts of ``CLUSTER_ADMIN_HOSTS``. Raises ``NodeUnavailableError`` without
    an admin URL, a token, or for a host outside ``CLUSTER_ADMIN_HOSTS``."""
    if not base:
        raise NodeUnavailableError("the node advertises no admin API (--admin-listen)")
    check_admin_host(base)
    return RemoteNodeOps(
        base,
        _token(),
        timeout_s(),
        write_timeout=write_timeout_s(),
        allowed_hosts=admin_hosts(),
    )


def ops_of(node: str) -> RemoteNodeOps:
    """The operations of the live node ``node`` (``name`` or
    ``name:broker_id``)."""
    return remote_node_ops(live_node(node).admin)


#: What ``ask_nodes`` answers for one read: its result, or why there is none
#: (``NodeUnavailableError``, or the node's own ``BrokerError``).
Answer = Any


def ask_nodes(
    calls: dict[str, tuple[str, dict[str, Read]]],
    status_first: bool = True,
) -> dict[str, dict[str, Answer] | BrokerError]:
    """Ask every node at once: ``calls`` maps a node's key to its admin URL
    and its reads by label (the first one its status); the answer maps each
    key to ``{label: result or BrokerError}``, or (``status_first``) to the
    error of its first read when that one has no answer.

    Every read of every node is asked at once and the whole fan-out waits at
    most one call's timeout plus a second: a node that never answers (a host
    that drops packets) costs the page that wait once, not once per node or
    read, and is named in the answer, not left out; a node slow on one read
    (a long delay backlog) keeps the answers of the others.
    """
    if not calls:
        return {}
    budget = timeout_s() + 1.0
    deadline = time.monotonic() + budget
    jobs = [
        (key, base, label, read)
        for key, (base, reads) in calls.items()
        for label, read in reads.items()
    ]
    pool = ThreadPoolExecutor(
        min(MAX_PARALLEL, len(jobs)), thread_name_prefix="cluster-admin"
    )

    def ask(base: str, read: Read) -> Any:
        left = deadline - time.monotonic()
        if left <= 0:
            raise NodeUnavailableError(f"no answer within {budget:g} s")
        return read(remote_node_ops(base).within(left))

    futures = [
        (key, label, pool.submit(ask, base, read)) for key, base, label, read in jobs
    ]
    # Do not wait for a silent node's thread: its socket timeout ends it.
    pool.shutdown(wait=False, cancel_futures=False)
    out: dict[str, dict[str, Answer] | BrokerError] = {}
    for key, label, fut in futures:
        answer: Answer
        try:
            answer = fut.result(timeout=max(0.0, deadline - time.monotonic()))
        except BrokerError as exc:
            answer = exc
        except TimeoutError:
            fut.cancel()
            answer = NodeUnavailableError(f"no answer within {budget:g} s")
        except Exception as exc:  # noqa: BLE001 - shown on the page, per node
            answer = NodeUnavailableError(f"{type(exc).__name__}: {exc}")
        got = out.setdefault(key, {})
        if isinstance(got, BrokerError):
            continue  # its status did not answer: the node is shown as such
        first = next(iter(calls[key][1]))
        if status_first and isinstance(answer, BrokerError) and label == first:
            out[key] = answer
        else:
            got[label] = answer
    return out
