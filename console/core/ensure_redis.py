"""Make sure Redis answers at REDIS_URL; start a private redis-server if not.

Run as ``python -m console.core.ensure_redis`` by ``make run`` and ``make test``.
A private server keeps its files under ``var/redis`` and is started only when
REDIS_URL names this machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import redis

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", ""}


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def ensure(url: str, var_dir: Path) -> str:
    """Return "up" if Redis answered, "started" if a private server was started."""
    if _answers(url):
        return "up"
    parsed = urlparse(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 6379
    if host not in LOCAL_HOSTS:
        raise SystemExit(f"Redis at {url} does not answer and is not on this machine")
    server = shutil.which("redis-server")
    if server is None:
        raise SystemExit("redis-server is not installed (make system-packages)")
    data = var_dir / "redis"
    data.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            server,
            "--daemonize",
            "yes",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            str(data.resolve()),
            "--pidfile",
            str((data / "redis.pid").resolve()),
            "--logfile",
            str((data / "redis.log").resolve()),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        check=True,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _answers(url):
            return "started"
        time.sleep(0.1)
    raise SystemExit(f"started redis-server on port {port}, but it does not answer")


def main() -> None:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    var_dir = Path(
        os.environ.get("VAR_DIR", Path(__file__).resolve().parents[2] / "var")
    )
    state = ensure(url, var_dir)
    print(f"redis {state} at {url}", file=sys.stderr)


if __name__ == "__main__":
    main()
