"""Make sure a PostgreSQL server answers for the test suite; print its URL.

Run as ``python -m console.core.ensure_postgres`` by ``make test``, which then
runs the console suite again with ``DATABASE_URL`` set to the printed URL (the
production database, not only SQLite). The server is the one at
``TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``)
when it answers; otherwise, when that URL names this machine, a private
cluster is created under ``var/postgres`` (Debian's ``postgresql`` package,
run as the ``postgres`` user, trust authentication on 127.0.0.1 only) and
started on the URL's port. pytest-django creates and drops its own test
database there. ``--stop`` stops that private cluster (``make test`` does when
it started it).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import ParseResult, urlparse, urlunparse

from console.core.private_server import ensure_server

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def _answers(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def _bin(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)),
        None,
    )
    if found is None:
        raise SystemExit(
            f"{name} not found: install PostgreSQL (apt-get install postgresql)"
        )
    return found


def _start_private(parsed: ParseResult, var_dir: Path) -> None:
    port = parsed.port or 5432
    base = (var_dir / "postgres").resolve()
    data = base / "data"
    base.mkdir(parents=True, exist_ok=True)
    as_postgres: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        shutil.chown(base, "postgres", "postgres")
        as_postgres = ["runuser", "-u", "postgres", "--"]
    if not (data / "PG_VERSION").exists():
        subprocess.run(
            [*as_postgres, _bin("initdb"), "-D", str(data), "-U", "postgres",
             "--auth=trust", "-E", "UTF8"],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    subprocess.run(
        [*as_postgres, _bin("pg_ctl"), "-D", str(data), "-l", str(base / "log"),
         "-w", "-o", f"-p {port} -k {base} -c listen_addresses=127.0.0.1", "start"],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip


def stop(var_dir: Path, url: str | None = None) -> str:
    """Stop the private cluster under ``var_dir/postgres``, if it runs; with
    ``url``, only if it is the server there (its port, the fourth line of
    ``postmaster.pid``)."""
    data = (var_dir / "postgres" / "data").resolve()
    if not (data / "postmaster.pid").exists():
        return "not running"
    if url is not None:
        try:
            port = int((data / "postmaster.pid").read_text().splitlines()[3])
        except (OSError, ValueError, IndexError):
            port = None
        if port is not None and port != (urlparse(url).port or 5432):
            return (
                f"not stopped: the private cluster (port {port}) is not the "
                f"one at {url}"
            )
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    done = subprocess.run(
        [*as_postgres, _bin("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        return f"not stopped: {(done.stderr or done.stdout).strip()}"
    return "stopped"


def ensure(url: str, var_dir: Path) -> str:
    """Return the URL of a database on an answering server (``broker_console``)."""
    ensure_server(
        url,
        _answers,
        lambda parsed: _start_private(parsed, var_dir),
        what="PostgreSQL",
        wait_s=30,
        poll_s=0.5,
    )
    parsed = urlparse(url)
    return urlunparse(parsed._replace(scheme="postgres", path="/broker_console"))


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[2]
    if sys.argv[1:] == ["--stop"]:
        url = os.environ.get("TEST_POSTGRES_URL", DEFAULT_URL)
        print(f"private PostgreSQL {stop(root / 'var', url)}", file=sys.stderr)
        sys.exit(0)
    print(ensure(os.environ.get("TEST_POSTGRES_URL", DEFAULT_URL), root / "var"))
    sys.exit(0)
