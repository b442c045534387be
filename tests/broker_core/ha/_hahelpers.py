"""Helpers shared by the HA tests (imported by module name): settings, a free
port, waiting on a condition, and comparing two stores record by record."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker_core import Broker
from broker_core.consumequeue import ConsumeQueueTable
from tests.support import free_port  # noqa: F401 - the HA tests import it from here

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SECRET = b"ha-test-secret-0123456789abcdef"
SETTINGS: dict[str, Any] = {
    "segment_size": 64 * 1024,
    "cq_units_per_file": 256,
    "index_slots": 4096,
    "index_entries": 65536,
    "flush_interval_ms": 50,
    "message_delay_level": "1s 2s 3s 5s",
}


def redis_up() -> bool:
    """Whether a Redis answers on 127.0.0.1:6379 (the registry of the tests
    that run ``serve`` nodes; ``make test`` starts one when none does)."""
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=1).close()
        return True
    except OSError:
        return False


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``cond`` until it returns a true value; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def secret_file(tmp: Path, secret: bytes = SECRET) -> Path:
    p = tmp / "ha.secret"
    p.write_bytes(secret + b"\n")
    return p


def start_master(
    store: Path, addr: str, secret: Path, out: Path, **options: Any
) -> subprocess.Popen[str]:
    """Start ``_haworkers.py master``; return once it serves HA."""
    p = subprocess.Popen(
        [sys.executable, str(HERE / "_haworkers.py"), "master", str(store), addr,
         str(secret), str(out), json.dumps(options)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert p.stdout is not None
    line = p.stdout.readline().strip()
    assert line == "READY", line
    return p


def start_replicate(
    store: Path, master: str, secret: Path, *extra: str, log: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``python -m broker_core replicate`` (a slave in its own process);
    ``extra`` are more of its flags (``--ha-tls-ca F``). Its JSON log lines
    (and anything on stderr) go to ``log``, else to a pipe."""
    out: Any = subprocess.PIPE if log is None else log.open("wb")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "broker_core", "replicate", str(store),
             "--master", master, "--secret-file", str(secret),
             "--store-config", json.dumps(SETTINGS), *extra],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    finally:
        if log is not None:
            out.close()  # the child has its own copy


def make_cert(tmp: Path, name: str, san: str) -> tuple[Path, Path]:
    """Make a self-signed certificate for ``san`` (``IP:127.0.0.1``,
    ``DNS:x``) with /usr/bin/openssl; return its and its key's paths."""
    cert, key = tmp / f"{name}.pem", tmp / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={name}",
         "-addext", f"subjectAltName={san}"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def slave_status(store: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((store / "ha" / "status.json").read_bytes()))
    except (FileNotFoundError, ValueError):
        return {}


def log_bytes(store: Path, end: int, segment_size: int) -> bytes:
    """Return the commit log ``[0, end)`` read from the segment files."""
    out = bytearray()
    base = 0
    while base < end:
        path = store / "commitlog" / f"{base:020d}"
        with open(path, "rb") as fh:
            out += fh.read(min(segment_size, end - base))
        base += segment_size
    return bytes(out)


def queue_units(store: Path) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
    """Return every consume queue's units, read from the files."""
    cqs = ConsumeQueueTable(store, SETTINGS["cq_units_per_file"])
    try:
        out = {}
        for topic, qid in cqs.on_disk():
            cq = cqs.get(topic, qid)
            out[(topic, qid)] = cq.read_units(0, cq.max_offset())
        return out
    finally:
        cqs.close()


def assert_same_store(master: Broker, slave: Broker) -> int:
    """Assert both logs, every queue and every message body are identical;
    return the number of queue units compared."""
    m, s = master.store, slave.store
    end = m.max_physical_offset()
    assert s.max_physical_offset() == end
    seg = SETTINGS["segment_size"]
    assert log_bytes(s.root, end, seg) == log_bytes(m.root, end, seg)
    mq, sq = queue_units(m.root), queue_units(s.root)
    mq = {k: v for k, v in mq.items() if v}
    sq = {k: v for k, v in sq.items() if v}
    assert sorted(sq) == sorted(mq)
    n = 0
    for key, units in mq.items():
        assert sq[key] == units, key
        for off, _size, _code in units:
            a, b = m.read_message(off), s.read_message(off)
            assert (a.topic, a.queue_id, a.body, a.msg_id) == (
                b.topic, b.queue_id, b.body, b.msg_id,
            )  # fmt: skip
            n += 1
    return n
