"""The generated SECRET_KEY: one key for every process that starts on a new var/."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

from console.core.secretfile import shared_secret

ROOT = Path(__file__).resolve().parents[3]
ROUNDS = 200


def _read_all(base: str, barrier, out) -> None:  # type: ignore[no-untyped-def]
    keys = []
    for i in range(ROUNDS):
        barrier.wait()
        keys.append(shared_secret(Path(base) / f"k{i}" / "secret_key"))
    out.put(keys)


def test_processes_racing_on_a_new_file_read_one_whole_key(tmp_path: Path) -> None:
    # Four processes meet at a barrier before each of 200 new files, so they all
    # find it missing at once (two Celery workers on a fresh var/ did, and one
    # died on the other's temporary file).
    for i in range(ROUNDS):
        (tmp_path / f"k{i}").mkdir()
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(4, timeout=30)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_read_all, args=(str(tmp_path), barrier, out))
        for _ in range(4)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    for i in range(ROUNDS):
        keys = {r[i] for r in results}
        assert len(keys) == 1 and len(keys.pop()) >= 60
        folder = tmp_path / f"k{i}"
        assert [p.name for p in folder.iterdir()] == ["secret_key"]
        assert (folder / "secret_key").stat().st_mode & 0o777 == 0o600


def test_settings_read_the_generated_key(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "VAR_DIR": str(tmp_path),
    }
    env.pop("SECRET_KEY", None)
    code = "from django.conf import settings; print(settings.SECRET_KEY)"
    first, second = (
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for _ in range(2)
    )
    assert first == second == (tmp_path / "secret_key").read_text().strip()
