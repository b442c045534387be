"""Under ``make test`` (``BROKER_TESTS_STRICT=1``) or on CI (``CI=true``) a
skip for something missing fails the run; a skip by design does not. And the
suite's other promises about its own machinery: one network range per xdist
worker (tests/workers.py), and what ``make test`` says and stops at its end."""

from __future__ import annotations

import inspect
import os
import shutil
import socket
import subprocess
import sys

import pytest

from tests import workers
from tests.conftest import ROOT
from tests.support import SERVERS, server_address, server_running
from tests.workers import worker_subnets

SAMPLE = """
import pytest
from tests.support import skip_by_design

def test_missing():
    pytest.skip("no redis-server")

@pytest.mark.skipif(True, reason="no openssl")
def test_missing_marker():
    pass

def test_not_here():
    skip_by_design("only through the admin API")

def test_fine():
    pass
"""


#: a module that skips as a whole (at collection)
SAMPLE_MODULE = """
import pytest
pytest.importorskip("no_such_module_here")

def test_never():
    pass
"""


def _run(tmp_path, strict: bool | dict[str, str], sample_text: str = SAMPLE) -> str:
    sample = tmp_path / "test_sample.py"
    sample.write_text(sample_text)
    env = {
        k: v for k, v in os.environ.items() if k not in ("CI", "BROKER_TESTS_STRICT")
    }
    if isinstance(strict, dict):
        env.update(strict)
    else:
        env["BROKER_TESTS_STRICT"] = "1" if strict else "0"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-q", "-rA",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(sample)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "env",
    [{"BROKER_TESTS_STRICT": "1"}, {"CI": "true"}, {"CI": "Yes"}, {"CI": "1"}],
    ids=lambda env: ",".join(f"{k}={v}" for k, v in env.items()),
)
def test_a_missing_thing_fails_under_make_test_and_ci(tmp_path, env):
    out = _run(tmp_path, strict=env)
    # the marker's skip happens at set-up: an error there, a failure in a call
    assert "1 failed, 1 passed, 1 skipped, 1 error" in out, out[-2000:]
    assert "no redis-server" in out and "BROKER_TESTS_STRICT=1 or CI=true" in out


@pytest.mark.parametrize(
    "env",
    [{"BROKER_TESTS_STRICT": "0"}, {"CI": "false"}, {}],
    ids=lambda env: ",".join(f"{k}={v}" for k, v in env.items()) or "unset",
)
def test_outside_make_test_and_ci_it_is_a_skip(tmp_path, env):
    out = _run(tmp_path, strict=env)
    assert "1 passed, 3 skipped" in out, out[-2000:]


def test_a_module_skipped_whole_fails_too(tmp_path):
    out = _run(tmp_path, strict={"CI": "true"}, sample_text=SAMPLE_MODULE)
    assert "1 error" in out and "no_such_module_here" in out, out[-2000:]
    out = _run(tmp_path, strict=False, sample_text=SAMPLE_MODULE)
    assert "1 skipped" in out, out[-2000:]


# -- tests/workers.py: a network range per worker, never one for two ---------


def test_each_worker_gets_its_own_listed_range():
    assert worker_subnets("10.77.0, 10.77.1.0,10.77.2", 3) == [
        "10.77.0",
        "10.77.1",
        "10.77.2",
    ]
    assert worker_subnets("10.77.0", 1) == ["10.77.0"]


@pytest.mark.parametrize(
    "given", ["10.77.0", "10.77.0,10.77.1", "10.77.0,10.77.0,10.77.1", "10.77"]
)
def test_too_few_listed_ranges_stop_the_run(given):
    with pytest.raises(pytest.UsageError, match="BROKER_TEST_SUBNET"):
        worker_subnets(given, 3)


def test_too_few_free_ranges_stop_the_run(monkeypatch):
    monkeypatch.setattr(workers, "_subnets", lambda: ["198.51.100", "203.0.113"])
    assert worker_subnets(None, 2) == ["198.51.100", "203.0.113"]
    with pytest.raises(pytest.UsageError, match="TEST_WORKERS"):
        worker_subnets(None, 3)


# -- make test: the servers it started, and its last line --------------------


def test_was_running_asks_where_the_set_up_looks(monkeypatch):
    from console.core import ensure_postgres, ensure_redis

    assert SERVERS["postgres"][1] == ensure_postgres.DEFAULT_URL
    assert f'"REDIS_URL", "{SERVERS["redis"][1]}"' in inspect.getsource(ensure_redis)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{port}/3")
        monkeypatch.setenv("TEST_POSTGRES_URL", f"postgresql://u@localhost:{port}/db")
        assert server_address("redis") == ("127.0.0.1", port)
        assert server_running("redis") and server_running("postgres")
    assert not server_running("redis")


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_a_failed_set_up_says_neither_phase_ran(tmp_path):
    # MAKE=false: the set-up fails at once; BIN without a python: nothing stopped
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    done = subprocess.run(
        ["make", "-s", "test", "MAKE=false", f"BIN={tmp_path}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    last = done.stdout.strip().splitlines()[-1]
    assert "neither the main suite nor the PostgreSQL console suite ran" in last
    assert "exit" not in last
