"""Small helpers shared by the test suite (importable as ``tests.support``)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the usual race:
    something may take it before the caller binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
