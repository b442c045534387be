"""A real etcd cluster for the controller tests: ``EtcdCluster(tmp, 3)``
starts three members on loopback ports (Debian's ``etcd-server``), each a
process the test can kill and start again."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests.support import free_port


def etcd_unavailable() -> str | None:
    if shutil.which("etcd") is None:
        return "no etcd (Debian's etcd-server; make setup installs it)"
    return None


class EtcdCluster:
    def __init__(self, tmp: Path, members: int = 3, attempts: int = 3) -> None:
        self.tmp = tmp
        self.names = [f"e{i}" for i in range(members)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        # Ports are picked free but may be taken before etcd binds them (the
        # usual race; once, in CI, no member ever answered): a cluster that
        # does not come up is started again, afresh, on other ports.
        for attempt in range(1, attempts + 1):
            self._configure(tmp / f"run{attempt}")
            for n in self.names:
                self.start(n)
            try:
                self.wait_healthy()
                return
            except Exception:
                logs = self._log_tails()
                self.close()
                if attempt == attempts:
                    raise AssertionError(
                        f"etcd did not come up in {attempts} tries: {logs}"
                    ) from None

    def _configure(self, where: Path) -> None:
        where.mkdir(parents=True, exist_ok=True)
        self.where = where
        self.client = {n: free_port() for n in self.names}
        self.peer = {n: free_port() for n in self.names}
        initial = ",".join(f"{n}=http://127.0.0.1:{self.peer[n]}" for n in self.names)
        self._args = {
            n: [
                "etcd",
                "--name",
                n,
                "--data-dir",
                str(where / f"etcd-{n}"),
                "--listen-client-urls",
                f"http://127.0.0.1:{self.client[n]}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{self.client[n]}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{self.peer[n]}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{self.peer[n]}",
                "--initial-cluster",
                initial,
                "--initial-cluster-token",
                f"{self.tmp.name}-{where.name}",
                "--initial-cluster-state",
                "new",
                "--log-level",
                "warn",
            ]  # fmt: skip
            for n in self.names
        }

    def _log_tails(self) -> str:
        out = []
        for n in self.names:
            code = self.procs[n].poll() if n in self.procs else None
            try:
                tail = (self.where / f"etcd-{n}.log").read_bytes()[-400:]
            except OSError:
                tail = b""
            out.append(f"{n} (exit {code}): {tail.decode(errors='replace')}")
        return " | ".join(out)

    @property
    def urls(self) -> str:
        return ",".join(f"http://127.0.0.1:{self.client[n]}" for n in self.names)

    def start(self, name: str) -> None:
        self.procs[name] = subprocess.Popen(
            self._args[name],
            stdout=open(self.where / f"etcd-{name}.log", "ab"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )

    def kill(self, name: str) -> None:
        p = self.procs[name]
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(10)

    def wait_healthy(self, timeout: float = 30) -> None:
        """Until a write through the members goes in (a quorum exists)."""
        from broker_core.cluster.controller import ControllerUnavailable, Etcd

        etcd = Etcd.from_url(self.urls)
        deadline = time.monotonic() + timeout
        while True:
            try:
                etcd.txn([], [etcd.put_op("/health", 1)])
                return
            except ControllerUnavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def close(self) -> None:
        for n in self.names:
            self.kill(n)
