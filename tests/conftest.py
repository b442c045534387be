"""Fixtures shared by the broker_core and console test trees."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: ``make test`` sets ``BROKER_TESTS_STRICT=1``, and a CI service ``CI=true``
#: (``1`` and ``yes`` too, in any case): a skip for something missing (Redis,
#: Chromium, Node.js, openssl, mount, a network namespace...) is a failure
#: there, so that a broken set-up cannot pass green; only
#: ``tests.support.skip_by_design`` skips.
STRICT = os.environ.get("BROKER_TESTS_STRICT") == "1" or os.environ.get(
    "CI", ""
).strip().lower() in ("true", "1", "yes")

#: The tests' Spark drivers (the reports' SparkSession in this process and in
#: the Celery workers and commands a test starts) live for one test file over
#: a few hundred rows: C1 alone and the serial collector cost them ~40% less
#: CPU than HotSpot's defaults (C2 and G1 compiling and collecting on every
#: core), which the long-running product keeps. ``SPARK_CONF_`` variables are
#: the product's own way in (console/reports/jobs/session.py); one set outside
#: wins.
#: The same for the executors and the daemons (Master, Worker) of the tests'
#: Spark clusters (bench/spark_cluster.py starts them with ``spark-class``).
_SHORT_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("SPARK_CONF_spark__driver__extraJavaOptions", _SHORT_JVM)
os.environ.setdefault("SPARK_CONF_spark__executor__extraJavaOptions", _SHORT_JVM)
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", _SHORT_JVM)


def pytest_configure(config: pytest.Config) -> None:
    workers = config.getoption("numprocesses", None)
    if workers and not config.pluginmanager.has_plugin("tests.workers"):
        raise pytest.UsageError(
            "pytest-xdist workers share Redis and the netns subnet without "
            "tests/workers.py: run with -p tests.workers --dist loadfile "
            "(make test TEST_WORKERS=N does)"
        )
    subnet = os.environ.get("BROKER_TEST_SUBNET", "")
    if subnet and not workers and not hasattr(config, "workerinput"):
        # one process: the first of a workers' list (tests/workers.py), as
        # "a.b.c.0" (tests/netns.py strips one ".0"), for tests/netns.py too
        # where a conftest imported it already
        from tests.support import subnet_prefix

        try:
            first = subnet_prefix(subnet.split(",")[0])
        except ValueError as e:
            raise pytest.UsageError(f"BROKER_TEST_SUBNET={subnet!r}: {e}") from None
        os.environ["BROKER_TEST_SUBNET"] = f"{first}.0"
        if "tests.netns" in sys.modules:
            netns: Any = sys.modules["tests.netns"]
            netns.SUBNET = first


def _strict_failure(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Under ``STRICT``, a skip that is not by design becomes a failure."""
    if not (STRICT and report.skipped) or hasattr(report, "wasxfail"):
        return
    from tests.support import BY_DESIGN

    reason = (
        str(report.longrepr[2])
        if isinstance(report.longrepr, tuple)
        else str(report.longrepr)
    )
    if BY_DESIGN not in reason:
        report.outcome = "failed"
        report.longrepr = (
            f"{reason}\n(skipped for want of something make test's set-up must "
            "provide: BROKER_TESTS_STRICT=1 or CI=true makes that a failure)"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator:
    outcome: Any = yield
    _strict_failure(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator:
    """A whole module skipped (``pytest.importorskip`` at its top, a skip with
    ``allow_module_level``) counts as its tests would."""
    outcome: Any = yield
    _strict_failure(outcome.get_result())


class CeleryServices:
    """A real Celery worker and beat for one test, with their logs in ``tmp``."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.env: dict[str, str] = {}
        self.procs: list[subprocess.Popen[bytes]] = []
        self._logs: list = []

    def start(
        self,
        redis_url: str,
        worker: list[str],
        more_workers: dict[str, list[str]] | None = None,
        **env: str,
    ) -> None:
        """Migrate a fresh SQLite database, then start ``celery worker *worker``
        (and one more per ``more_workers`` entry, logged under its name) and
        ``celery beat`` with ``env`` added to the console's settings."""
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "console.settings",
            "VAR_DIR": str(self.tmp),
            "DATABASE_URL": f"sqlite:///{self.tmp / 'db.sqlite3'}",
            "REDIS_URL": redis_url,
            "PYTHONUNBUFFERED": "1",
            "LOG_TICKS": "1",  # the tests read the tick tasks' log lines
            **env,
        }
        py = sys.executable
        subprocess.run(
            [py, "manage.py", "migrate", "--noinput", "-v0"],
            cwd=ROOT,
            env=self.env,
            check=True,
        )
        celery = [py, "-m", "celery", "-A", "console"]
        for name, args in (
            ("worker", ["worker", *worker]),
            *((n, ["worker", *a]) for n, a in (more_workers or {}).items()),
            ("beat", ["beat", "-s", str(self.tmp / "beat-schedule")]),
        ):
            log = open(self.tmp / f"{name}.log", "w")  # closed in stop()
            self._logs.append(log)
            self.procs.append(
                subprocess.Popen(
                    [*celery, *args],
                    cwd=ROOT,
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )

    def log(self, name: str) -> str:
        """The output so far of ``worker`` or ``beat``."""
        path = self.tmp / f"{name}.log"
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        """Terminate both (kill after 20 s); return codes are then set."""
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for fh in self._logs:
            fh.close()
        self._logs = []


@pytest.fixture
def celery_services(tmp_path: Path) -> Iterator[CeleryServices]:
    """Start with ``celery_services.start(redis_url, worker_args, **env)``;
    stopped at the end of the test whatever happens."""
    services = CeleryServices(tmp_path)
    try:
        yield services
    finally:
        services.stop()
