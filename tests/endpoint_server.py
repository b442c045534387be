"""Starting ``python -m broker_core serve`` and the official client's
scenario processes for the endpoint tests (``tests/broker_core/endpoint/
test_protocol.py`` and the tests that run their own server)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
SCEN = ROOT / "tests" / "broker_core" / "endpoint" / "scenarios.py"
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def start_server(
    store: Path,
    port: int,
    log: Path,
    extra: tuple[str, ...] = (),
    workers: int | None = None,
) -> subprocess.Popen:
    """``serve --embedded-timers``; with ``workers`` > 1, check-backs between
    the workers go through Redis on a channel of this server's own. The
    default is ``$ENDPOINT_TEST_WORKERS`` (else 1): every test that starts
    its server here runs against ``serve --workers N`` with it set. The front
    is ``$ENDPOINT_FRONT`` (python, native; default: serve's own default):
    every such test runs against the native front with
    ``ENDPOINT_FRONT=native``."""
    if workers is None:
        workers = int(os.environ.get("ENDPOINT_TEST_WORKERS", "1"))
    if workers == 1:
        relay: tuple[str, ...] = ("--no-redis-relay",)
    else:
        relay = (
            "--workers", str(workers), "--redis-url", REDIS_URL,
            "--redis-channel", f"broker_core:grpc:check:test{port}",
        )  # fmt: skip
    cmd = [
        PY, "-m", "broker_core", "serve", "--store", str(store),
        "--listen", f"127.0.0.1:{port}", "--embedded-timers",
        "--transaction-timeout-ms", "1000", "--check-interval-ms", "2000",
        "--max-delivery-attempts", "3", "--consumer-backoff-ms", "300,300,300",
        # These scenarios send FIFO, delayed and transactional messages to
        # topics made on first use (NORMAL); the type check has its own tests
        # (test_topic_types.py) and the conformance suite.
        "--no-topic-type-check",
        *relay, *front_args(), *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=open(log, "w"), stderr=subprocess.STDOUT
    )
    wait_port(proc, port)
    if workers > 1:
        wait_workers(proc, store, workers)
    return proc


def front_args() -> tuple[str, ...]:
    """``--front`` for ``$ENDPOINT_FRONT`` (nothing when it is unset)."""
    front = os.environ.get("ENDPOINT_FRONT", "")
    return ("--front", front) if front else ()


def wait_port(proc: subprocess.Popen, port: int) -> None:
    end = time.time() + 30
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError("server exited")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start")


def wait_workers(proc: subprocess.Popen, store: Path, n: int) -> dict[int, dict]:
    """Wait until the ``n`` workers serve: index -> announcement (pid, ports)."""
    from broker_core.endpoint.workers import announced

    end = time.time() + 30
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError("server exited")
        up = announced(store)
        if len(up) == n and all(pid_alive(w["pid"]) for w in up.values()):
            return up
        time.sleep(0.1)
    raise RuntimeError(f"{n} workers did not start")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_server(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        return -9


def spawn(name: str, endpoint: str, suffix: str, home: Path) -> subprocess.Popen:
    env = dict(os.environ, HOME=str(home), PYTHONPATH="")
    return subprocess.Popen(
        [PY, str(SCEN), name, endpoint, suffix],
        cwd=str(home),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def result(proc: subprocess.Popen, timeout: float = 120) -> dict:
    out, _ = proc.communicate(timeout=timeout)
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"scenario failed:\n{out[-4000:]}"
    return json.loads(lines[-1][7:])
