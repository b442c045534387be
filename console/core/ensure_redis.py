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
from pathlib import Path
from urllib.parse import ParseResult

import redis

from console.core.private_server import ensure_server


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def _start_private(parsed: ParseResult, var_dir: Path) -> None:
    server = shutil.which("redis-server")
    if server is None:
        raise SystemExit("redis-server is not installed (make system-packages)")
    data = (var_dir / "redis").resolve()
    data.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [server, "--daemonize", "yes", "--bind", "127.0.0.1",
         "--port", str(parsed.port or 6379), "--dir", str(data),
         "--pidfile", str(data / "redis.pid"), "--logfile", str(data / "redis.log"),
         "--save", "", "--appendonly", "no"],
        check=True,
    )  # fmt: skip


def ensure(url: str, var_dir: Path) -> str:
    """Return "up" if Redis answered, "started" if a private server was started."""
    return ensure_server(
        url,
        _answers,
        lambda parsed: _start_private(parsed, var_dir),
        what="Redis",
        wait_s=10,
    )


def main() -> None:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    var_dir = Path(
        os.environ.get("VAR_DIR", Path(__file__).resolve().parents[2] / "var")
    )
    state = ensure(url, var_dir)
    print(f"redis {state} at {url}", file=sys.stderr)


if __name__ == "__main__":
    main()
