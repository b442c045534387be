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
HTTP status the node answered, None when it did not answer; 503
``node_unavailable``), worded once, here (``unanswered``): "node broker-a:1
(http://10.0.0.13:9081) did not answer: connection refused". A name that is
no live node of the registry is ``NodeNotFoundError`` (404
``node_not_found``): "node broker-zz is not a live node in cluster c1". A
node that answered HTTP 500 is up but failed the request: ``NodeFailedError``
(502 ``node_error``), "node broker-a (http://10.0.0.13:9081) failed the
request: see its log". What
the node refuses is the library's own ``BrokerError``.
"""

from __future__ import annotations

import errno
import http
import http.client
import logging
import re
import socket
import ssl
import time
import urllib.error
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from django.conf import settings

from broker_core.cluster.node_ops import (
    OPERATIONS,
    READS,
    NodeOperations,
    NodeUnavailableError,
    RemoteNodeOps,
    check_host,
)
from broker_core.errors import BrokerError

log = logging.getLogger("console.cluster")

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


class NodeNotFoundError(NodeUnavailableError):
    """A node name the route registry has no live node for (never
    registered, or expired: it stopped heartbeating), or a broker name with
    no live master where an action needs one: 404 ``node_not_found``
    wherever it is asked (the API's ``X-Broker-Node``, a picked node's
    pages, the Cluster page's actions, ``/api/cluster/nodes/<key>/``).
    A ``NodeUnavailableError`` (the node cannot be asked), so every place
    that shows why a node did not answer shows this too."""

    code = "node_not_found"
    http_status = 404


class NodeFailedError(NodeUnavailableError):
    """A node that answered, but with HTTP 500 (it failed the request: a bug
    or a fault of its own, in its log): not "unavailable", it is up and
    another request may well work. 502 ``node_error``: "node broker-a
    (http://10.0.0.13:9081) failed the request: see its log". A
    ``NodeUnavailableError`` still (the node gave no operation's result), so
    every place that shows why a node gave no answer shows this too."""

    code = "node_error"
    http_status = 502


def cluster_name() -> str:
    return str(getattr(settings, "BROKER_CLUSTER", ""))


def not_live(node: str, what: str = "a live node", why: str = "") -> NodeNotFoundError:
    """The one wording of a name with no live node: "node broker-zz is not a
    live node in cluster c1"."""
    said = f"node {node} is not {what} in cluster {cluster_name()}"
    return NodeNotFoundError(f"{said} ({why})" if why else said)


def find(name: str, broker_id: int | None = None) -> Any:
    """A live node from the registry (None: not registered); a registry that
    does not answer is a ``NodeUnavailableError`` saying so."""
    try:
        return registry().find(name, broker_id)
    except Exception as exc:  # noqa: BLE001 - redis errors, a bad URL
        log.warning("route registry of cluster %s: %r", cluster_name(), exc)
        raise NodeUnavailableError(
            f"the route registry of cluster {cluster_name()} did not answer: "
            f"{reason_of(exc)}"
        ) from exc


def live_node(node: str) -> Any:
    """The live node named ``name`` (its serving node) or ``name:broker_id``;
    ``NodeNotFoundError`` for a name the registry has no live node for."""
    name, _, bid = node.partition(":")
    try:
        target = find(name, int(bid)) if bid else find(name)
    except ValueError:
        target = None
    if target is None:
        raise not_live(node)
    return target


def live_master(node: str) -> Any:
    """The live node ``node``, refused (``NodeNotFoundError``) unless it is a
    master."""
    target = live_node(node)
    if not target.is_master:
        raise not_live(
            node, "a live master", f"its live node is {target.key}, a {target.role}"
        )
    return target


# -- why a node did not answer: one wording --------------------------------


def _http_phrase(status: int) -> str:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "an unknown status"
    if status in (401, 403):
        return f"HTTP {status} {phrase}: it refused the admin token"
    return f"HTTP {status} {phrase}"


def _phrase(exc: BaseException, wait: float | None) -> str:
    """A short human phrase for one low-level failure ("" : no phrase)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return "its TLS certificate is not trusted"
    if isinstance(exc, ssl.SSLError):
        return "the TLS handshake failed"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionResetError | ConnectionAbortedError):
        return "the connection was reset"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "it closed the connection without answering"
    if isinstance(exc, TimeoutError):
        return f"no answer within {wait:g} s" if wait else "no answer in time"
    if isinstance(exc, socket.gaierror):
        return "its host name is not known (DNS)"
    if isinstance(exc, http.client.HTTPException):
        return "its answer is not HTTP"
    if isinstance(exc, OSError) and exc.errno in (errno.EHOSTUNREACH,
                                                  errno.ENETUNREACH):  # fmt: skip
        return "its host cannot be reached"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    if isinstance(exc, ValueError):
        return "its answer is not JSON"
    return ""


def reason_of(exc: BaseException, wait: float | None = None) -> str:
    """Why a call did not get an answer, as a short phrase ("connection
    refused", "no answer within 5 s", "HTTP 502 Bad Gateway"), never the raw
    ``<urlopen error ...>`` text (the log keeps that)."""
    status = getattr(exc, "status", None)
    if isinstance(exc, NodeUnavailableError) and status:
        return _http_phrase(int(status))
    text = str(exc)
    if "no answer within" in text:  # RemoteNodeOps' own: a read's or a write's
        return text[text.index("no answer within") :]
    if host := re.search(r"(\S+) is not in CLUSTER_ADMIN_HOSTS", text):
        return (
            f"its host {host.group(1)} is not in CLUSTER_ADMIN_HOSTS, so the "
            "admin token is not sent there"
        )
    if "no admin API" in text:
        return "it advertises no admin API (--admin-listen)"
    if text.startswith("CLUSTER_ADMIN_TOKEN_FILE"):
        return text
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            break
        if isinstance(seen, urllib.error.URLError) and not isinstance(
            seen, urllib.error.HTTPError
        ):
            if isinstance(seen.reason, BaseException):
                seen = seen.reason
                continue
            return (
                _phrase(TimeoutError(), wait)
                if "timed out" in str(seen.reason)
                else str(seen.reason)
            )
        if not isinstance(seen, NodeUnavailableError):
            if phrase := _phrase(seen, wait):
                return phrase
        seen = seen.__cause__ or seen.__context__
    if text.endswith(": no result"):
        return "its answer holds no result"
    # Nothing known: the sentence without RemoteNodeOps' "node <url>: <op>: "
    # and urllib's wrapping.
    text = re.sub(r"^node \S+: \w+: ", "", text)
    text = re.sub(r"<urlopen error (?:\[Errno \d+\] )?(.*)>", r"\1", text)
    return text or type(exc).__name__


def unanswered(
    node: str, url: str, exc: BaseException, op: str = "", wait: float | None = None
) -> NodeUnavailableError:
    """The one ``NodeUnavailableError`` of a node that did not answer:
    "node broker-a:1 (http://10.0.0.13:9081) did not answer: connection
    refused" (no answer), "... answered HTTP 502 Bad Gateway" (an HTTP error
    that is not the library's), "... failed the request: see its log" (HTTP
    500: ``NodeFailedError``, 502 ``node_error``), "... was not asked: ..."
    (no admin URL, a
    host outside ``CLUSTER_ADMIN_HOSTS``, no token). The raw error is
    logged, not shown."""
    if isinstance(exc, NodeNotFoundError) or getattr(exc, "worded", False):
        return exc  # type: ignore[return-value]
    status = getattr(exc, "status", None)
    reason = reason_of(exc, wait)
    where = f"node {node} ({url})" if url else f"node {node}"
    text = str(exc)
    if status == 500:
        sentence = f"{where} failed the request: see its log"
    elif status:
        sentence = f"{where} answered {reason}"
    elif any(s in text for s in ("CLUSTER_ADMIN_", "no admin API")):
        sentence = f"{where} was not asked: {reason}"
    else:
        sentence = f"{where} did not answer: {reason}"
    log.warning("%s (%s%s)", sentence, f"{op}: " if op else "", _raw(exc))
    kind = NodeFailedError if status == 500 else NodeUnavailableError
    worded = kind(sentence, status)
    worded.worded = True  # type: ignore[attr-defined]
    worded.node = node  # type: ignore[attr-defined]
    worded.reason = reason  # type: ignore[attr-defined]
    return worded


def _raw(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return f"{exc}; {cause!r}" if cause is not None else str(exc)


def describe(exc: BaseException, node: str = "") -> str:
    """What the API, a picked node's 503 page and the Cluster page say of a
    node that could not be asked: ``exc``'s own sentence when it was worded
    here (``unanswered``, ``not_live``), else worded now for ``node`` (the
    request's node when not given)."""
    if isinstance(exc, NodeNotFoundError) or getattr(exc, "worded", False):
        return str(exc)
    if not isinstance(exc, NodeUnavailableError):
        return str(exc)
    if str(exc).startswith(("the route registry", "route registry")):
        return str(exc)
    if not node:
        from console.cluster.scope import chosen_node, own_node

        node = chosen_node() or own_node()
    return str(unanswered(node, "", exc))


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


class NamedNodeOps(RemoteNodeOps):
    """``RemoteNodeOps`` whose failures to answer name the node as the
    operator knows it (``node``) and say why in a short phrase
    (``unanswered``)."""

    node: str = ""


def _named(name: str) -> Any:
    method = getattr(RemoteNodeOps, name)

    def call(self: NamedNodeOps, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except NodeUnavailableError as exc:
            wait = self.timeout if name in READS else self.write_timeout
            raise unanswered(self.node, self.url, exc, name, wait) from exc

    call.__name__ = call.__qualname__ = name
    call.__doc__ = method.__doc__
    return call


for _op in OPERATIONS:
    setattr(NamedNodeOps, _op, _named(_op))


def remote_node_ops(base: str, node: str = "") -> NamedNodeOps:
    """The operations of the node ``node`` whose admin API is at ``base``:
    the token of ``CLUSTER_ADMIN_TOKEN_FILE``, a read's and a write's
    timeouts, the hosts of ``CLUSTER_ADMIN_HOSTS``. Raises
    ``NodeUnavailableError`` without an admin URL, a token, or for a host
    outside ``CLUSTER_ADMIN_HOSTS``; every failure to answer names ``node``
    (default: ``base``)."""
    node = node or base
    try:
        if not base:
            raise NodeUnavailableError(
                "the node advertises no admin API (--admin-listen)"
            )
        check_admin_host(base)
        token = _token()
    except NodeUnavailableError as exc:
        raise unanswered(node, base, exc) from exc
    ops = NamedNodeOps(
        base,
        token,
        timeout_s(),
        write_timeout=write_timeout_s(),
        allowed_hosts=admin_hosts(),
    )
    ops.node = node
    return ops


def ops_of(node: str, master: bool = False) -> NamedNodeOps:
    """The operations of the live node ``node`` (``name`` or
    ``name:broker_id``; ``master``: refused unless it is a master)."""
    target = live_master(node) if master else live_node(node)
    return remote_node_ops(target.admin, node)


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

    def late(key: str, base: str) -> NodeUnavailableError:
        silent = NodeUnavailableError(f"no answer within {budget:g} s")
        return unanswered(key, base, silent)

    def ask(key: str, base: str, read: Read) -> Any:
        left = deadline - time.monotonic()
        if left <= 0:
            raise late(key, base)
        return read(remote_node_ops(base, key).within(left))

    futures = [
        (key, base, label, pool.submit(ask, key, base, read))
        for key, base, label, read in jobs
    ]
    # Do not wait for a silent node's thread: its socket timeout ends it.
    pool.shutdown(wait=False, cancel_futures=False)
    out: dict[str, dict[str, Answer] | BrokerError] = {}
    for key, base, label, fut in futures:
        answer: Answer
        try:
            answer = fut.result(timeout=max(0.0, deadline - time.monotonic()))
        except NodeUnavailableError as exc:
            answer = unanswered(key, base, exc, label)
        except BrokerError as exc:
            answer = exc
        except TimeoutError:
            fut.cancel()
            answer = late(key, base)
        except Exception as exc:  # noqa: BLE001 - shown on the page, per node
            answer = unanswered(key, base, exc, label)
        got = out.setdefault(key, {})
        if isinstance(got, BrokerError):
            continue  # its status did not answer: the node is shown as such
        first = next(iter(calls[key][1]))
        if status_first and isinstance(answer, BrokerError) and label == first:
            out[key] = answer
        else:
            got[label] = answer
    return out
