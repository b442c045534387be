"""The first admin: a generated password is printed, kept in a file only its
owner reads (``make run``'s log scrolls it away at once) and printed again
below the URLs; how to reset a forgotten one is printed too."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

from tests.conftest import ROOT


def _run(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_generated_password_is_kept_for_its_owner(tmp_path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ADMIN_PASSWORD", "DATABASE_URL")
    }
    env.update(
        DJANGO_SETTINGS_MODULE="console.settings",
        VAR_DIR=str(tmp_path),
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
    )
    assert _run(env, "migrate", "--noinput", "-v0").returncode == 0
    made = _run(env, "ensure_admin")
    assert made.returncode == 0, made.stderr
    kept = tmp_path / "admin_password"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    user, password = kept.read_text().split()
    assert user == "admin" and password in made.stdout
    check = _run(
        env, "shell", "-c",
        "from django.contrib.auth import get_user_model;"
        "print(get_user_model().objects.get(username='admin')"
        f".check_password('{password}'))",
    )  # fmt: skip
    assert check.stdout.strip().splitlines()[-1] == "True", check.stderr
    urls = _run(env, "print_urls").stdout
    assert f"admin {password}" in urls and "changepassword" in urls
    kept.unlink()  # once read
    assert "sign in" not in _run(env, "print_urls").stdout
