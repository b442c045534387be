"""The suite on several pytest-xdist workers (``make test`` runs ``-n``).

Loaded with ``-p tests.workers`` (``make test`` adds it beside ``-n``; a
worker without it stops, see tests/conftest.py); inert without xdist. Two
things:

* **What a worker shares with no other.** Each worker but the first gets a
  private ``redis-server`` on a free loopback port, as ``REDIS_URL`` (same
  database number), so the tests that flush or fill Redis databases (the
  route registries, Celery brokers, ``tests.support.redis_db``) never see
  another worker's keys; and its own ``BROKER_TEST_SUBNET`` for the network
  namespaces (``tests/netns.py``): the n-th of a comma-separated list of /24
  prefixes given as ``BROKER_TEST_SUBNET`` (one per worker), or else of the
  ``SUBNETS`` no route of this machine covers. Never one range for two
  workers: too few for the workers stops the run before they start, saying
  what to set. Both are set before Django reads its settings, and child
  processes (Celery, endpoints, nested pytest runs) inherit them.
* **What runs together.** ``--dist loadfile`` is scheduled by file, as xdist
  does, except that every test marked ``spark`` (one SparkSession per worker
  process: one JVM, not one per worker) and every file that builds network
  namespaces (heavy, and one bridge at a time keeps them as they were timed)
  form one unit each; and each worker keeps pytest-django's order (database
  tests, transactional ones, the rest), as one process does. The longest
  units are handed out first.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the /24s for the workers' network namespaces: documentation (RFC 5737) and
#: benchmarking (RFC 2544) ranges, one per worker, less those this machine
#: routes already (``_subnets``)
SUBNETS = (
    "198.51.100", "203.0.113", "198.18.100", "198.18.101", "198.18.102", "198.18.103",
    "192.0.2",
)  # fmt: skip


def _subnets() -> list[str]:
    """``SUBNETS`` less the ranges a route of this machine's covers (its own
    network may be one: this project's machine is on 192.0.2.0/24, and the
    third worker's cluster tests found no route to their hosts). The
    bridges of the tests (``rmq*`` devices) do not count."""
    import ipaddress
    import subprocess

    try:
        routes = subprocess.run(
            ["ip", "-4", "route", "show", "table", "all"],
            capture_output=True, text=True, timeout=10,
        ).stdout.splitlines()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        routes = []
    taken = []
    for line in routes:
        words = line.split()
        if not words:
            continue
        dev = words[words.index("dev") + 1] if "dev" in words[:-1] else ""
        if dev.startswith("rmq"):
            continue
        dest = words[1] if words[0] in ("local", "broadcast", "unicast") else words[0]
        try:
            net = ipaddress.ip_network(dest, strict=False)
        except ValueError:
            continue  # "default" and the like
        if net.prefixlen >= 8:  # a default route covers everything: not "taken"
            taken.append(net)
    return [
        s
        for s in SUBNETS
        if not any(ipaddress.ip_network(f"{s}.0/24").overlaps(n) for n in taken)
    ]


def worker_subnets(given: str | None, workers: int) -> list[str]:
    """The /24 prefixes of ``workers`` workers, the n-th worker's n-th:
    ``given`` (``BROKER_TEST_SUBNET``), a comma-separated list, or when it is
    unset the free ``SUBNETS`` (``_subnets``). Raises ``pytest.UsageError``
    rather than give two workers one range: a single prefix for several
    workers, a prefix named twice, or fewer free ranges than workers."""
    fix = (
        f"set BROKER_TEST_SUBNET to {workers} comma-separated /24 prefixes, one "
        "per worker (e.g. BROKER_TEST_SUBNET=10.77.0,10.77.1,...), or run fewer "
        "workers (make test TEST_WORKERS=N, pytest -n N)"
    )
    if given is None or not given.strip():
        free = _subnets()
        if len(free) < workers:
            raise pytest.UsageError(
                f"{workers} pytest-xdist workers need a network range each, but "
                f"only {len(free)} of {', '.join(SUBNETS)} (/24s) are free of "
                f"this machine's routes: {fix}"
            )
        return free[:workers]
    from tests.support import subnet_prefix

    try:
        prefixes = [subnet_prefix(p) for p in given.split(",")]
    except ValueError as e:
        raise pytest.UsageError(
            f"BROKER_TEST_SUBNET={given!r}: {e} (such as 198.51.100)"
        ) from None
    if len(set(prefixes)) < len(prefixes):
        raise pytest.UsageError(
            f"BROKER_TEST_SUBNET={given!r} names a range twice: {fix}"
        )
    if len(prefixes) < workers:
        raise pytest.UsageError(
            f"BROKER_TEST_SUBNET={given!r} names {len(prefixes)} network "
            f"range(s) for {workers} pytest-xdist workers, which never share "
            f"one: {fix}"
        )
    return prefixes[:workers]


def _worker_count(config: pytest.Config) -> int:
    """How many workers the controller starts (``-n`` becomes ``--tx``
    entries, ``N*popen`` for N of them)."""
    count = 0
    for spec in config.getoption("tx", None) or []:
        head, star, _ = str(spec).partition("*")
        count += int(head) if star and head.isdigit() else 1
    return count


#: set once a worker's environment is made (a nested pytest keeps it)
MARK = "BROKER_TESTS_WORKER_ENV"


def _private_redis(url: str) -> str:
    """A redis-server of this worker's alone (stopped when it exits), with
    ``url``'s database number."""
    if shutil.which("redis-server") is None:
        return url  # the tests that need Redis fail for it as they would anyway
    from broker_core.benchmark import private_redis

    stack = contextlib.ExitStack()
    atexit.register(stack.close)
    return stack.enter_context(private_redis(None, db=urlsplit(url).path or "/0"))


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or os.environ.get(MARK) == worker:
        return
    os.environ[MARK] = worker
    index = int(worker[2:])
    # the controller's list (pytest_configure), checked there; else this
    # worker's own reading, as strict
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or index + 1)
    subnets = worker_subnets(os.environ.get("BROKER_TEST_SUBNET"), count)
    # "a.b.c.0": tests/netns.py strips one ".0" (of "10.77.0" it kept "10.77")
    os.environ["BROKER_TEST_SUBNET"] = f"{subnets[index]}.0"
    if index > 0:
        # console/settings_test.py's default, which the first worker keeps
        url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/15"
        os.environ["REDIS_URL"] = _private_redis(url)


_units: dict[str, str] = {}


def _unit(path: str) -> str:
    """The scheduling unit of the test file ``path``."""
    if path not in _units:
        try:
            text = (ROOT / path).read_text()
        except OSError:
            text = ""
        if "mark.spark" in text or path.startswith("tests/console/reports/"):
            _units[path] = "spark"
        elif "tests.netns" in text or "from tests import netns" in text:
            _units[path] = "netns"
        else:
            _units[path] = path
    return _units[path]


#: handed out first within their phase, in this order (the longest)
FIRST = (
    "spark",
    "netns",
    "tests/conformance/test_conformance.py",
    "tests/console/core/test_api_schemathesis.py",
    "tests/console/core/test_supervise.py",
    "tests/console/core/test_celery_services.py",
    "tests/broker_core/test_store_damage_suite.py",
    "tests/broker_core/test_store_integrity.py",
)


def _phase(item: pytest.Item) -> int:
    """pytest-django's order (its ``get_order_number``): 0 database tests in a
    transaction, 1 transactional ones (their flush drops the migrations' rows,
    the browser ones set DJANGO_ALLOW_ASYNC_UNSAFE), 2 the rest."""
    from django.test import TestCase, TransactionTestCase
    from pytest_django.fixtures import validate_django_db

    cls = getattr(item, "cls", None)
    if cls and issubclass(cls, TransactionTestCase):
        return 0 if issubclass(cls, TestCase) else 1
    marker = item.get_closest_marker("django_db")
    uses_db, transactional = False, False
    if marker:
        transaction, reset_sequences, *_ = validate_django_db(marker)
        uses_db, transactional = True, bool(transaction or reset_sequences)
    fixtures = getattr(item, "fixturenames", [])
    if transactional or "transactional_db" in fixtures or "live_server" in fixtures:
        return 1
    return 0 if uses_db or "db" in fixtures else 2


#: the controller's file of phases, named before its workers start
PHASES = "BROKER_TESTS_PHASES"


def _phases_file() -> Path:
    return Path(os.environ[PHASES])


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no":
        # one range per worker, or a clear stop before any starts (the workers
        # inherit the list and take theirs, pytest_load_initial_conftests)
        subnets = worker_subnets(
            os.environ.get("BROKER_TEST_SUBNET"), _worker_count(config)
        )
        os.environ["BROKER_TEST_SUBNET"] = ",".join(subnets)
        fd, path = tempfile.mkstemp(prefix="broker-tests-phases-", suffix=".json")
        os.close(fd)
        os.environ[PHASES] = path
        _made.append(path)


_made: list[str] = []


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """On a worker: tell the controller each test's phase (a file: the
    collection it gets holds node ids only). Tests that share a node id
    (Schemathesis names every API operation's test by the function alone)
    get their item name instead: the scheduler keys tests by node id and
    would run one of them."""
    if not hasattr(config, "workerinput") or PHASES not in os.environ:
        return
    import json
    from collections import Counter

    seen = Counter(item.nodeid for item in items)
    for item in items:
        if seen[item.nodeid] > 1:
            new = f"{item.nodeid.rpartition('::')[0]}::{item.name}"
            if hasattr(item, "_id"):  # pytest 9: a structured NodeId
                item._id = type(item._id).parse(new)
            else:
                item._nodeid = new

    target = _phases_file()
    tmp = target.with_suffix(f".{os.getpid()}")
    tmp.write_text(json.dumps({item.nodeid: _phase(item) for item in items}))
    os.replace(tmp, target)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    """Files as ``--dist loadfile``, the groups above, and pytest-django's
    order kept on each worker: a unit is one phase of a file (or group), and
    no unit of a phase is handed out before every unit of the phase before
    it (what one worker runs goes 0, 1, 2 as a single process does)."""
    if config.getvalue("dist") != "loadfile":
        return None
    import json

    from xdist.scheduler import LoadFileScheduling

    phases: dict[str, int] = {}

    def phase(nodeid: str) -> int:
        if not phases:
            try:
                phases.update(json.loads(_phases_file().read_text()))
            except (OSError, ValueError):
                phases[""] = 2
        return phases.get(nodeid, 2)

    class Scheduling(LoadFileScheduling):
        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return f"{phase(nodeid)}:{_unit(nodeid.split('::', 1)[0])}"

        def _assign_work_unit(self, node) -> None:  # type: ignore[no-untyped-def]
            if not self._ordered:
                self._ordered = True

                def key(item):  # type: ignore[no-untyped-def]
                    number, _, unit = item[1].partition(":")
                    rank = FIRST.index(unit) if unit in FIRST else len(FIRST)
                    return (number, rank, item[0])

                ordered = sorted(enumerate(self.workqueue), key=key)
                units = [(scope, self.workqueue[scope]) for _, scope in ordered]
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return Scheduling(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _cpu_usage and _cpu_usage[0].exists():  # the timeline's cgroup, emptied
        group = _cpu_usage[0].parent
        try:
            (group.parent / "cgroup.procs").write_text(str(os.getpid()))
            group.rmdir()
        except OSError:
            pass
    for path in _made:
        Path(path).unlink(missing_ok=True)
        os.environ.pop(PHASES, None)
    _made.clear()


#: ``BROKER_TESTS_TIMELINE=FILE``: each worker appends a line per test to FILE
#: (worker, start and end in seconds since the epoch, CPU seconds, node id), to
#: see where a run's time went (which units ran last, how long a worker sat
#: idle, which tests cost the CPU). The CPU is its worker's process tree (the
#: servers and JVMs a test starts included), counted by a cgroup v1 ``cpuacct``
#: group made for the worker below its own; ``-`` where there is none.
TIMELINE = "BROKER_TESTS_TIMELINE"
_started: dict[str, tuple[float, float | None]] = {}
_cpu_usage: list[Path] = []


def _cpu_seconds() -> float | None:
    """This worker's CPU seconds so far (its cgroup), or None."""
    if not _cpu_usage:
        _cpu_usage.append(Path("/nonexistent"))
        try:
            for line in Path("/proc/self/cgroup").read_text().splitlines():
                _, controllers, path = line.split(":", 2)
                if "cpuacct" in controllers.split(","):
                    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
                    group = Path("/sys/fs/cgroup/cpuacct") / path.lstrip("/")
                    group = group / f"tests-{worker}-{os.getpid()}"
                    group.mkdir(exist_ok=True)
                    (group / "cgroup.procs").write_text(str(os.getpid()))
                    _cpu_usage[0] = group / "cpuacct.usage"
        except OSError:
            pass
    try:
        return int(_cpu_usage[0].read_text()) / 1e9
    except (OSError, ValueError):
        return None


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    # (an xdist controller sees its workers' tests too: they write their own)
    if os.environ.get(TIMELINE) and not _made:
        _started[nodeid] = (time.time(), _cpu_seconds())


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    path = os.environ.get(TIMELINE)
    start, cpu = _started.pop(nodeid, (None, None))
    if path and start is not None:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        now = _cpu_seconds()
        used = f"{now - cpu:.2f}" if now is not None and cpu is not None else "-"
        with open(path, "a") as out:
            out.write(f"{worker} {start:.3f} {time.time():.3f} {used} {nodeid}\n")
