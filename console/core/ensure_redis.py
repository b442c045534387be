"""Make sure Redis answers at REDIS_URL; start a private redis-server if not.

Run as ``python -m console.core.ensure_redis`` by ``make run`` and ``make test``.
A private server keeps its files under ``var/redis`` and is started only when
REDIS_URL names this machine. ``--stop`` stops that private server (``make
test`` does when it started it: nothing answered before the run).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import ParseResult, urlparse

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


def stop(var_dir: Path, url: str | None = None) -> str:
    """Stop the private server of ``var_dir`` (its pid file), if it runs; with
    ``url``, only if it is the server there (its port): a private server that
    ``make run`` started for another REDIS_URL is left alone."""
    pidfile = (var_dir / "redis" / "redis.pid").resolve()
    try:
        pid = int(pidfile.read_text().strip())
        # A pid file left by a server gone long ago may name another process.
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"redis-server" not in cmdline:
            return "not running"
        if url is not None:
            port = urlparse(url).port or 6379
            if not cmdline.rstrip(b"\0").endswith(f":{port}".encode()):
                listen = cmdline.rstrip(b"\0").split(b" ")[-1].decode(errors="replace")
                return (
                    f"not stopped: the private server (pid {pid}, {listen}) is not "
                    f"the one at {url}"
                )
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return "not running"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return f"stopped (pid {pid})"
        time.sleep(0.1)
    return f"still running (pid {pid}) 10 s after SIGTERM"


def main() -> None:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    var_dir = Path(
        os.environ.get("VAR_DIR", Path(__file__).resolve().parents[2] / "var")
    )
    if sys.argv[1:] == ["--stop"]:
        print(f"private redis {stop(var_dir, url)}", file=sys.stderr)
        return
    state = ensure(url, var_dir)
    print(f"redis {state} at {url}", file=sys.stderr)


if __name__ == "__main__":
    main()
