"""The SparkSession the report jobs share (one per process, kept warm:
``getOrCreate`` returns it to every later run of the same worker).

``local[*]`` unless told otherwise (``SPARK_MASTER``). Local runs use few
shuffle partitions and no UI. On a cluster the executors need ``broker_core``
and ``pyarrow`` only: ``broker_core`` is zipped and shipped with the job (the
zip is deleted when the process exits).

Spark settings from the environment, applied last (they win):

* ``SPARK_CONF_FILE``: a file in ``spark-defaults.conf`` form (``key value``
  or ``key=value`` per line, ``#`` comments);
* ``SPARK_CONF_<key>`` variables, the key's dots written as double
  underscores: ``SPARK_CONF_spark__executor__memory=4g``.

Without ``spark.sql.shuffle.partitions`` among them, a cluster run sizes its
shuffles to its input (``shuffle_partitions``).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import socket
import sys
import tempfile
import zipfile
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

import broker_core
from console.reports.jobs.errors import ReportInputError

#: The directory holding ``broker_core`` and ``console`` (the project root).
PROJECT_ROOT = Path(broker_core.__file__).resolve().parent.parent
log = logging.getLogger(__name__)


def _broker_core_zip() -> str:
    """Return a zip of the ``broker_core`` package, for executors on other hosts
    (removed when this process exits)."""
    target = Path(tempfile.gettempdir()) / f"broker_core-{os.getpid()}.zip"
    pkg = PROJECT_ROOT / "broker_core"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in pkg.rglob("*.py"):
            zf.write(path, path.relative_to(PROJECT_ROOT))
    atexit.register(target.unlink, missing_ok=True)
    return str(target)


def conf_from_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Spark settings from ``SPARK_CONF_FILE`` and ``SPARK_CONF_<key>``
    variables (later ones win). Raises ``ValueError`` for an unreadable file."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    path = env.get("SPARK_CONF_FILE")
    if path:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError as exc:
            raise ValueError(f"SPARK_CONF_FILE {path}: {exc}") from exc
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            found = re.match(r"([^\s=]+)\s*[=\s]\s*(.*)", line)
            if found is None:
                raise ValueError(f"SPARK_CONF_FILE {path}: no value in {line!r}")
            out[found.group(1)] = found.group(2)
    for name, value in env.items():
        if name.startswith("SPARK_CONF_") and name != "SPARK_CONF_FILE":
            out[name[len("SPARK_CONF_") :].replace("__", ".")] = value
    return out


def shuffle_partitions(input_bytes: int) -> int:
    """Shuffle partitions for a cluster run over ``input_bytes`` of log: one per
    128 MiB, 8 to 200 (Spark's default 200 made 1,000 tasks a report on 1M
    small messages)."""
    return max(8, min(200, -(-input_bytes // (128 << 20))))


class SparkUnavailable(ReportInputError):
    """The Spark master named by ``SPARK_MASTER`` does not answer."""


def check_master(master: str, timeout: float = 3.0) -> None:
    """Raise ``SparkUnavailable`` when no master of a ``spark://h1:p1,h2:p2``
    URL accepts a connection. Without this, Spark retries for about a minute
    and fails with "Cannot call methods on a stopped SparkContext", the real
    cause ("All masters are unresponsive") only in the JVM's log."""
    if not master.startswith("spark://"):
        return
    reasons = []
    for address in master[len("spark://") :].split(","):
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
            return
        except (OSError, ValueError) as exc:
            reasons.append(f"{address}: {exc}")
    raise SparkUnavailable(
        f"the Spark master does not answer ({'; '.join(reasons)}): start it "
        "(docs/reports.md, 'A Spark cluster') or correct SPARK_MASTER"
    )


def _stop_dead_context() -> None:
    """Stop the SparkContext a failed start left behind, if any."""
    from pyspark import SparkContext

    dead = SparkContext._active_spark_context
    if dead is not None:
        try:
            dead.stop()
        except Exception:  # already stopped on the JVM side
            log.debug("stopping a dead SparkContext", exc_info=True)
        SparkContext._active_spark_context = None


def get_session(
    master: str | None = None,
    app_name: str = "broker-reports",
    driver_memory: str | None = None,
) -> SparkSession:
    """Return the (shared) SparkSession for the reports."""
    master = master or os.environ.get("SPARK_MASTER") or "local[*]"
    local = master.startswith("local")
    active = SparkSession.getActiveSession()
    if active is None or active.sparkContext.master != master:
        check_master(master)
    # Python workers must use this interpreter and find broker_core.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(PROJECT_ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(PROJECT_ROOT), *[p for p in paths if p]]
        )
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false" if local else "true")
        .config("spark.sql.shuffle.partitions", "4" if local else "200")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory or "3g")
        .config("spark.sql.parquet.compression.codec", "zstd")
    )
    if local:
        # In local mode nothing outside this host talks to the driver: its
        # ports (block manager, RPC) listen on loopback, not on the machine's
        # external address. SPARK_CONF_spark__driver__bindAddress overrides.
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
            "spark.driver.host", "127.0.0.1"
        )
    for key, value in conf_from_env().items():
        builder = builder.config(key, value)
    # py4j logs its connection teardown at INFO from __del__, after stdout
    # may already be closed at interpreter exit.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        session = builder.getOrCreate()
    except Exception as exc:
        if local or "stopped SparkContext" not in str(exc):
            raise
        # The master took the connection but never registered the application:
        # Spark gives up after its three 20 s registration attempts and stops
        # the context it made. Stop it here too, or every later run in this
        # process would get the same dead context back.
        _stop_dead_context()
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        said = next(
            (line for line in lines if "Exception:" in line),
            lines[0] if lines else repr(exc),
        )
        raise SparkUnavailable(
            f"the Spark master at {master} took the connection but the "
            "application was stopped while it started: Spark stops it when no "
            "master registers it within a minute ('All masters are "
            "unresponsive! Giving up.' in the worker's log). Check that "
            "SPARK_MASTER names the master's RPC port (7077 by default, not its "
            f"web UI) and that the master runs Spark {pyspark.__version__}, the "
            f"version of this pyspark. Spark said: {said}"
        ) from exc
    session.sparkContext.setLogLevel("ERROR")
    if not local:
        session.sparkContext.addPyFile(_broker_core_zip())
    return session
