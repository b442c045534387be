"""``deploy/``'s systemd units: checked by ``systemd-analyze verify`` (this
machine's systemd is not PID 1, so they cannot be started here), with the
paths made this checkout's; and one unit per Procfile process, running the
same program."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

DEPLOY = ROOT / "deploy"

pytestmark = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="no systemd-analyze"
)


def render(dest: Path) -> list[Path]:
    """The units with ``/srv/broker`` made this checkout and the env file
    the copy in ``dest``."""
    out = []
    for unit in sorted(DEPLOY.glob("broker*.service")) + [DEPLOY / "broker.target"]:
        text = unit.read_text().replace("/srv/broker", str(ROOT))
        text = text.replace("/etc/broker/broker.env", str(dest / "broker.env"))
        (dest / unit.name).write_text(text)
        out.append(dest / unit.name)
    shutil.copy(DEPLOY / "broker.env", dest / "broker.env")
    return out


def verify(units: list[Path]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *map(str, units)],
        capture_output=True, text=True, cwd=units[0].parent, timeout=120,
    )  # fmt: skip


def test_the_units_verify(tmp_path: Path) -> None:
    units = render(tmp_path)
    r = verify(units)
    complaints = [
        line for line in r.stderr.splitlines()
        if any(u.name in line for u in units)
    ]  # fmt: skip
    assert r.returncode == 0 and not complaints, r.stderr


def test_a_broken_unit_fails_verification(tmp_path: Path) -> None:
    """The check can fail: a unit whose program does not exist."""
    units = render(tmp_path)
    web = tmp_path / "broker-web.service"
    web.write_text(
        re.sub(r"ExecStart=.*", "ExecStart=/nonexistent/gunicorn", web.read_text())
    )
    r = verify(units)
    assert r.returncode != 0 and "/nonexistent/gunicorn" in r.stderr


def test_one_unit_per_procfile_process() -> None:
    procfile = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, command = line.partition(":")
            procfile[name.strip()] = command
    units = {p.stem.removeprefix("broker-"): p for p in DEPLOY.glob("broker-*.service")}
    setup = units.pop("setup")  # the one-time setup every process unit needs
    assert set(units) == set(procfile)
    assert "Type=oneshot" in setup.read_text()
    target = (DEPLOY / "broker.target").read_text()
    for name, unit in units.items():
        assert f"broker-{name}.service" in target
        text = unit.read_text()
        assert "Requires=broker-setup.service" in text
        assert "StartLimitIntervalSec=0" in text  # never left failed
        assert "Restart=always" in text
        exec_line = next(
            x for x in unit.read_text().splitlines() if x.startswith("ExecStart=")
        )
        # The same program and subcommand as the Procfile's line.
        words = [
            w
            for w in procfile[name].split()
            if not w.startswith(("env", "BROKER_", "CLUSTER_"))
        ]
        program = next(w for w in words if w.startswith(".venv/bin/"))
        assert f"/srv/broker/{program}" in exec_line, (name, exec_line)
        for flag in re.findall(
            r"(?<!\S)(--[a-z-]+|-Q|worker|beat|serve)(?!\S)", procfile[name]
        ):
            assert flag in exec_line, (name, flag, exec_line)


def exec_starts(unit: Path) -> list[str]:
    """The unit's ExecStart lines as shell commands: systemd's ``$$`` and
    ``%%`` escapes undone, ``/srv/broker`` made this checkout."""
    return [
        x.removeprefix("ExecStart=")
        .replace("$$", "$")
        .replace("%%", "%")
        .replace("/srv/broker", str(ROOT))
        for x in unit.read_text().splitlines()
        if x.startswith("ExecStart=")
    ]


def exec_start(unit: Path) -> str:
    return exec_starts(unit)[0]


@pytest.mark.slow
def test_the_grpc_and_admin_units_commands_serve(tmp_path: Path) -> None:
    """The setup unit's commands, then the two broker units', run as systemd
    would (the env file's settings in the environment): setup makes the
    admin API's token, the console's tables and the first admin; the endpoint
    listens, and the admin API alone answers over the same store, also once
    the endpoint has stopped."""
    import os
    import signal
    import socket
    import time

    from broker_core.cluster.node_ops import NodeUnavailableError, RemoteNodeOps
    from tests.support import free_port

    grpc_port, admin_port = free_port(), free_port()
    token = tmp_path / "var" / "admin_token"  # made by the setup unit
    env = {
        **os.environ,
        "VAR_DIR": str(tmp_path / "var"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'console.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "BROKER_STORE_DIR": str(tmp_path / "store"),
        "GRPC_LISTEN": f"127.0.0.1:{grpc_port}",
        "ADMIN_LISTEN": f"127.0.0.1:{admin_port}",
        "CLUSTER_ADMIN_TOKEN_FILE": str(token),
        "REDIS_URL": "redis://127.0.0.1:1/0",  # none: the relay retries quietly
    }
    for command in exec_starts(DEPLOY / "broker-setup.service"):
        done = subprocess.run(
            ["/bin/sh", "-c", command], cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    assert len(token.read_text().strip()) >= 32
    assert oct(token.stat().st_mode & 0o777) == "0o600"
    assert (tmp_path / "console.sqlite3").stat().st_size > 0
    again = subprocess.run(  # safe to run again: the token is kept
        ["/bin/sh", "-c", exec_starts(DEPLOY / "broker-setup.service")[0]],
        cwd=ROOT, env=env, timeout=60,
    )  # fmt: skip
    assert again.returncode == 0
    procs = {
        name: subprocess.Popen(
            ["/bin/sh", "-c", "exec " + exec_start(DEPLOY / f"broker-{name}.service")],
            cwd=ROOT, env=env, start_new_session=True,
            stdout=open(tmp_path / f"{name}.log", "w"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        for name in ("grpc", "admin")
    }  # fmt: skip

    def node() -> dict:
        ops = RemoteNodeOps(
            f"http://127.0.0.1:{admin_port}", token.read_text().strip(), timeout=5
        )
        return ops.node_status()

    def wait(cond, what: str):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if cond():
                    return
            except (OSError, NodeUnavailableError):
                pass
            time.sleep(0.2)
        logs = {n: (tmp_path / f"{n}.log").read_text()[-2000:] for n in procs}
        raise AssertionError(f"timed out waiting for {what}: {logs}")

    try:
        wait(lambda: socket.create_connection(("127.0.0.1", grpc_port), 1), "grpc")
        wait(lambda: node()["role"] == "ASYNC_MASTER", "the admin API")
        os.killpg(procs["grpc"].pid, signal.SIGTERM)
        assert procs["grpc"].wait(30) == 0
        assert "log_end" in node()  # the console's sight outlives the endpoint
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(30)
    assert procs["admin"].returncode == 0
