"""Small helpers shared by the test suite (importable as ``tests.support``)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the usual race:
    something may take it before the caller binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def admin_of_store(store_dir: Path | str, token: str, **admin: Any) -> Iterator[Any]:
    """A store, its endpoint (not serving gRPC) and the endpoint's admin API
    on a free port of 127.0.0.1, in this process: what ``serve
    --admin-listen`` runs. Yields the ``AdminServer`` (its ``address``, its
    endpoint as ``ep``); ``admin``: more ``AdminServer`` arguments."""
    from broker_core import Broker
    from broker_core.cluster.admin import AdminServer
    from broker_core.endpoint.config import EndpointConfig
    from broker_core.endpoint.server import Endpoint

    broker = Broker.open(str(store_dir))
    ep = Endpoint(broker, EndpointConfig())
    server = AdminServer(ep, admin.pop("listen", "127.0.0.1:0"), token, **admin)
    try:
        yield server.start()
    finally:
        server.stop()
        ep.close()
        broker.close()


#: in a skip's reason: the test does not apply to this configuration (as
#: opposed to something missing, which fails under ``make test``)
BY_DESIGN = "by design: "


def skip_by_design(reason: str) -> None:
    """Skip a test that does not apply to this configuration; every other
    skip is missing infrastructure, a failure under ``make test``
    (``BROKER_TESTS_STRICT=1``, see tests/conftest.py)."""
    import pytest

    pytest.skip(BY_DESIGN + reason)


def redis_db(db: int) -> str:
    """``REDIS_URL`` (the suite's Redis, as ``make test`` and the console
    take it; default ``redis://127.0.0.1:6379/0``) with database ``db``: a
    test that needs a database of its own never names a host or port."""
    import os
    from urllib.parse import urlsplit, urlunsplit

    url = urlsplit(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    return urlunsplit((url.scheme, url.netloc, f"/{db}", url.query, ""))


def subnet_prefix(text: str) -> str:
    """The first three octets of a /24 given as ``198.51.100`` or
    ``198.51.100.0`` (``BROKER_TEST_SUBNET``'s entries); ``ValueError`` for
    anything else (tests/netns.py reads its range with it: ``10.77.0`` is a
    prefix, not ``10.77``)."""
    parts = text.strip().split(".")
    if len(parts) == 4 and parts[3] == "0":
        parts = parts[:3]
    if len(parts) != 3 or not all(p.isdigit() and int(p) < 256 for p in parts):
        raise ValueError(f"{text!r} is not the first three octets of a /24")
    return ".".join(str(int(p)) for p in parts)


#: where ``make test``'s set-up finds (or starts) its servers, as the modules
#: that do it read them: the variable, its default (console/core/ensure_redis.py,
#: console/core/ensure_postgres.py ``DEFAULT_URL``) and the port when the URL
#: names none (the private server's, ``parsed.port or ...`` there)
SERVERS = {
    "redis": ("REDIS_URL", "redis://127.0.0.1:6379/0", 6379),
    "postgres": (
        "TEST_POSTGRES_URL",
        "postgresql://postgres@127.0.0.1:5432/postgres",
        5432,
    ),
}


def server_address(kind: str) -> tuple[str, int]:
    """The host and port of ``make test``'s Redis or PostgreSQL (``kind``):
    those of the URL ``ensure_redis``/``ensure_postgres`` will use, parsed as
    they parse it (no host: this machine)."""
    import os
    from urllib.parse import urlparse

    var, default, port = SERVERS[kind]
    parsed = urlparse(os.environ.get(var, default))
    return parsed.hostname or "127.0.0.1", parsed.port or port


def server_running(kind: str) -> bool:
    """Whether something accepts connections at ``server_address(kind)`` now:
    ``make test`` asks before its set-up, and at its end stops only a private
    server it started (standard library only: there may be no venv yet)."""
    try:
        with socket.create_connection(server_address(kind), timeout=2):
            return True
    except OSError:
        return False


if __name__ == "__main__":
    # python3 tests/support.py was-running redis|postgres: prints 1 or 0
    import sys

    if sys.argv[1:2] != ["was-running"] or sys.argv[2:] not in (
        ["redis"],
        ["postgres"],
    ):
        raise SystemExit("usage: tests/support.py was-running redis|postgres")
    print(int(server_running(sys.argv[2])))
