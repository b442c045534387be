"""What ``ensure_redis`` and ``ensure_postgres`` share: use the server at a URL
when it answers, else start a private one on this machine and wait for it."""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import ParseResult, urlparse

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", ""}


def ensure_server(
    url: str,
    answers: Callable[[str], bool],
    start: Callable[[ParseResult], None],
    *,
    what: str,
    wait_s: float,
    poll_s: float = 0.1,
) -> str:
    """ "up" when ``answers(url)``; else, when ``url`` names this machine,
    ``start(parsed url)`` and "started" once it answers within ``wait_s``.
    Raises ``SystemExit`` saying why otherwise (``what`` names the server)."""
    if answers(url):
        return "up"
    parsed = urlparse(url)
    if (parsed.hostname or "") not in LOCAL_HOSTS:
        raise SystemExit(f"{what} at {url} does not answer and is not on this machine")
    start(parsed)
    deadline = time.monotonic() + wait_s
    while not answers(url):
        if time.monotonic() > deadline:
            raise SystemExit(
                f"started a private {what}, but it does not answer at {url}"
            )
        time.sleep(poll_s)
    return "started"
