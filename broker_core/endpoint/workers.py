"""``serve --workers N``: N endpoint processes on one port over one store.

Why processes: one endpoint is one Python interpreter, so one core at most
(the GIL); the store and the pop state (``pop.db``) are made for several
processes, so N workers share them and the kernel spreads connections over
the workers' listening sockets (``SO_REUSEPORT``). A client's calls go over
one connection, so they all reach one worker.

The supervisor (this module, in the parent process) starts each worker as
``python -m broker_core serve ... --workers 1 --worker I``, restarts one that
dies once all have started (after a back-off if it keeps dying young; one that
dies while they start stops them all: it cannot start), and on SIGTERM or
SIGINT stops them all (SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``). A worker
announces itself in ``<store>/grpc/workers/<I>.json`` (pid, ports) once it
serves; what must run once per store runs in worker 0 only (see
``Endpoint``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from broker_core.metadata import atomic_write_json

WORKERS_DIR = Path("grpc") / "workers"
#: Per-worker client lists, merged into ``clients.json`` (``clients.py``).
CLIENTS_DIR = Path("grpc") / "clients"
STOP_TIMEOUT_S = 20.0
#: A worker that dies sooner than this after its start is restarted after a
#: growing delay (0.5 s doubling up to 10 s), not at once.
YOUNG_S = 5.0

log = logging.getLogger("broker_core.endpoint.workers")


def announce(store_root: Path, index: int, ports: dict[str, int | None]) -> None:
    """Written by worker ``index`` once it serves: its pid and ports."""
    atomic_write_json(
        store_root / WORKERS_DIR / f"{index}.json",
        {"index": index, "pid": os.getpid(), "started_at": time.time(), **ports},
    )


def announced(store_root: Path) -> dict[int, dict]:
    """The workers' announcements: index -> {pid, port, ...}."""
    out = {}
    directory = store_root / WORKERS_DIR
    for path in directory.glob("*.json") if directory.is_dir() else ():
        try:
            d = json.loads(path.read_text())
            out[int(d["index"])] = d
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def _die_with_parent() -> None:
    """In the child: SIGTERM when the supervisor dies, even by SIGKILL
    (Linux ``PR_SET_PDEATHSIG``), so no worker outlives it."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class Supervisor:
    def __init__(self, store: str, workers: int, argv: list[str]) -> None:
        self.root = Path(store)
        self.n = workers
        #: ``serve`` arguments as given; each worker gets them plus its index
        self.argv = argv
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.started: dict[int, float] = {}
        self.delay: dict[int, float] = {}
        self.stopping = False

    def _spawn(self, i: int) -> None:
        cmd = [sys.executable, "-m", "broker_core", "serve", *self.argv]
        cmd += ["--workers", "1", "--worker", str(i)]
        self.procs[i] = subprocess.Popen(cmd, preexec_fn=_die_with_parent)
        self.started[i] = time.monotonic()
        log.info("worker %d started, pid %d", i, self.procs[i].pid)

    def _stop(self, *_sig: object) -> None:
        self.stopping = True

    def run(self) -> int:
        # Announcements and client lists of an earlier run are not this one's.
        for sub in (WORKERS_DIR, CLIENTS_DIR):
            for stale in (self.root / sub).glob("*.json"):
                stale.unlink(missing_ok=True)
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        for i in range(self.n):
            self._spawn(i)
        ready = False
        due: dict[int, float] = {}
        while True:
            time.sleep(0.2)
            if self.stopping:
                break
            if not ready:
                up = announced(self.root)
                if all(
                    up.get(i, {}).get("pid") == p.pid for i, p in self.procs.items()
                ):
                    ready = True
                    log.info("gRPC endpoint: %d workers", self.n)
            for i, p in list(self.procs.items()):
                if i in due:
                    if time.monotonic() >= due[i] and not self.stopping:
                        del due[i]
                        self._spawn(i)
                    continue
                code = p.poll()
                if code is None:
                    continue
                if not ready:
                    # Not a crash to outlive: it cannot start (port taken,
                    # bad arguments, unreadable store).
                    log.error("worker %d exited with %s while starting", i, code)
                    self._shutdown(due)
                    return 1
                young = time.monotonic() - self.started[i] < YOUNG_S
                self.delay[i] = min(10.0, self.delay.get(i, 0.25) * 2) if young else 0
                log.warning(
                    "worker %d (pid %d) exited with %s; restarting in %.1f s",
                    i, p.pid, code, self.delay[i],
                )  # fmt: skip
                due[i] = time.monotonic() + self.delay[i]
        return self._shutdown(due)

    def _shutdown(self, due: dict[int, float]) -> int:
        running = {i: p for i, p in self.procs.items() if i not in due}
        for p in running.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        end = time.monotonic() + STOP_TIMEOUT_S
        codes = []
        for p in running.values():
            try:
                codes.append(p.wait(timeout=max(0.1, end - time.monotonic())))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait())
        log.info("workers stopped: %s", codes)
        return 0 if all(c == 0 for c in codes) else 1
