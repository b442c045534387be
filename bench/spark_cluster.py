"""A Spark standalone cluster on this machine: one Master and N Workers from
the venv's pyspark, on loopback, for the reports on a real cluster.

Usage:
    python bench/spark_cluster.py start [--workers 2] [--cores 1] [--memory 1g]
                                        [--hide DIR ...] [--dir var/spark-cluster]
    python bench/spark_cluster.py stop  [--dir var/spark-cluster]

``start`` prints the master URL (``spark://127.0.0.1:PORT``) and the PIDs
(kept in ``DIR/pids``); set ``SPARK_MASTER`` to that URL for the console's
reports worker or ``run_report``. ``--hide DIR`` (root only) runs each Worker,
and so its executors, in a mount namespace of its own with an empty tmpfs over
``DIR``: the executors cannot see what is there (the store, the local export),
which is how the test suite shows that a cluster reading the export from an
object store needs no disk shared with the broker host. Each Worker gets its
own work directory outside the hidden ones.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


@dataclass
class Cluster:
    url: str
    directory: Path
    procs: list[subprocess.Popen] = field(default_factory=list)

    def stop(self) -> None:
        stop_pids([p.pid for p in self.procs])
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        (self.directory / "pids").unlink(missing_ok=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(predicate, what: str, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    tail = log.read_text()[-3000:] if log.exists() else ""
    raise RuntimeError(f"{what} not up within {timeout:.0f} s; {log}:\n{tail}")


def start(
    directory: Path,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    hide: list[Path] | None = None,
    timeout: float = 90.0,
    port: int = 0,
    webui_port: int = 0,
    worker_webui_port: int = 0,
) -> Cluster:
    """Start a Master and ``workers`` Workers; return when all are registered.

    Ports: the master's ``port`` and ``webui_port``, worker ``i``'s web UI on
    ``worker_webui_port + i``; 0 (the default) takes a free one each (a
    firewall or a second cluster on the host wants them fixed)."""
    directory.mkdir(parents=True, exist_ok=True)
    port, ui = port or _free_port(), webui_port or _free_port()
    url = f"spark://127.0.0.1:{port}"
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(directory),
        # The executors' Python: this venv's (no shared disk is needed for the
        # data; the software is installed on every host the same way).
        "PYSPARK_PYTHON": sys.executable,
    }
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        env.pop(name, None)  # the executors get credentials from the job only
    cluster = Cluster(url, directory)
    master_log = directory / "master.log"
    cluster.procs.append(
        subprocess.Popen(
            [str(SPARK_CLASS), MASTER, "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(ui)],
            stdout=open(master_log, "w"), stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )
    )  # fmt: skip
    try:
        _wait_for(
            lambda: "I have been elected leader" in master_log.read_text(),
            "the Spark master",
            timeout,
            master_log,
        )
        for i in range(workers):
            work = directory / f"worker-{i}"
            work.mkdir(exist_ok=True)
            command = [
                str(SPARK_CLASS), WORKER, url, "--host", "127.0.0.1",
                "--cores", str(cores), "--memory", memory,
                "--work-dir", str(work),
                "--webui-port",
                str(worker_webui_port + i if worker_webui_port else _free_port()),
            ]  # fmt: skip
            if hide:
                mounts = " && ".join(
                    f"mount -t tmpfs -o size=1m,mode=0755 hidden {shlex.quote(str(d))}"
                    for d in hide
                )
                command = [
                    "unshare", "--mount", "--propagation", "private", "--",
                    "sh", "-c", f"{mounts} && exec {shlex.join(command)}",
                ]  # fmt: skip
            log = directory / f"worker-{i}.log"
            cluster.procs.append(
                subprocess.Popen(
                    command, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                    env=env, start_new_session=True,
                )
            )  # fmt: skip
        for i in range(workers):
            log = directory / f"worker-{i}.log"
            _wait_for(
                lambda log=log: (
                    "Successfully registered with master" in log.read_text()
                ),
                f"Spark worker {i}",
                timeout,
                log,
            )
    except BaseException:
        cluster.stop()
        raise
    (directory / "pids").write_text(" ".join(str(p.pid) for p in cluster.procs))
    return cluster


def stop_pids(pids: list[int]) -> None:
    """SIGTERM each process group (the JVMs and their executors)."""
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=("start", "stop"))
    ap.add_argument("--dir", type=Path, default=Path("var/spark-cluster"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--memory", default="1g")
    ap.add_argument("--hide", type=Path, action="append", default=[])
    ap.add_argument("--port", type=int, default=0, help="the master's (0: a free one)")
    ap.add_argument("--webui-port", type=int, default=0, help="the master's web UI")
    ap.add_argument(
        "--worker-webui-port", type=int, default=0,
        help="worker i's web UI on this + i (0: free ones)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    if args.action == "stop":
        pids = (
            (args.dir / "pids").read_text().split()
            if (args.dir / "pids").exists()
            else []
        )
        stop_pids([int(p) for p in pids])
        (args.dir / "pids").unlink(missing_ok=True)
        print(f"stopped {len(pids)} process(es)")
        return 0
    cluster = start(
        args.dir, args.workers, args.cores, args.memory, args.hide,
        port=args.port, webui_port=args.webui_port,
        worker_webui_port=args.worker_webui_port,
    )  # fmt: skip
    print(cluster.url)
    print(f"pids: {' '.join(str(p.pid) for p in cluster.procs)} (in {args.dir}/pids)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
