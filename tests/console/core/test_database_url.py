"""DATABASE_URL switches the console from SQLite to PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PG_ADMIN_URL = os.environ.get(
    "TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres"
)


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.services
@pytest.mark.slow
def test_migrate_and_admin_on_postgresql(tmp_path):
    psycopg = pytest.importorskip("psycopg")
    from console.core.ensure_postgres import ensure

    # The server at TEST_POSTGRES_URL when one answers, else a private one
    # started under var/postgres (as make test-postgres does): never a skip on
    # a machine where nothing was started beforehand.
    ensure(PG_ADMIN_URL.replace("postgres://", "postgresql://"), ROOT / "var")
    try:
        admin = psycopg.connect(
            PG_ADMIN_URL.replace("postgres://", "postgresql://"),
            autocommit=True,
            connect_timeout=3,
        )
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {PG_ADMIN_URL}: {exc}")
    name = f"broker_test_{uuid.uuid4().hex[:8]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "console.settings",
            "VAR_DIR": str(tmp_path),
            "DATABASE_URL": PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}",
            "ADMIN_PASSWORD": "s3cret-pass",
        }
        migrate = _run(env, "migrate", "--noinput", "-v0")
        assert migrate.returncode == 0, migrate.stderr
        first = _run(env, "ensure_admin")
        second = _run(env, "ensure_admin")
        assert "created admin account 'admin'" in first.stdout
        assert "admin account exists" in second.stdout
        with psycopg.connect(
            PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgres://", "postgresql://")
            + f"/{name}"
        ) as conn:
            rows = conn.execute(
                "SELECT username FROM auth_user WHERE is_superuser"
            ).fetchall()
        assert rows == [("admin",)]
        # SQLite stayed untouched: the console used PostgreSQL only.
        assert not (tmp_path / "console.sqlite3").exists()
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
