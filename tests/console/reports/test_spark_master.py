"""A Spark master that does not answer fails a run at once with that reason
(not after a minute of retries with "stopped SparkContext"), and
``run_report`` keeps its stdout pure JSON when runs fail."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.support import free_port as _closed_port

pytestmark = [pytest.mark.spark, pytest.mark.django_db]


def test_dead_master_fails_the_run_with_its_reason(spark, produced, settings):
    from console.reports import services
    from console.reports.models import ReportRun

    settings.BROKER_STORE_DIR = produced[0]
    settings.SPARK_MASTER = f"spark://127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    run = services.run_now("topic_traffic")
    assert run.status == ReportRun.Status.FAILED
    assert "the Spark master does not answer" in run.error
    assert "Connection refused" in run.error and "Traceback" not in run.error
    assert time.monotonic() - started < 15


def test_run_report_stdout_is_json_when_a_run_fails(spark, produced, settings, capsys):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    settings.BROKER_STORE_DIR = produced[0]
    settings.SPARK_MASTER = f"spark://127.0.0.1:{_closed_port()},127.0.0.1:1"
    with pytest.raises(CommandError, match="failed: topic_traffic"):
        call_command("run_report", "topic_traffic")
    out, err = capsys.readouterr()
    assert json.loads(out)["status"] == "FAILED"
    assert "does not answer" in err


def test_spark_errors_are_stored_once_and_short():
    from console.reports.failures import describe_error

    class Py4JJavaError(Exception):
        pass

    Py4JJavaError.__module__ = "py4j.protocol"
    java = "An error occurred\n" + "\n".join(f"\tat frame{i}" for i in range(200))
    text = describe_error(Py4JJavaError(java))
    assert text.count("An error occurred") == 1
    assert "189 more lines" in text and len(text.splitlines()) == 13
    try:
        raise ValueError("plain")
    except ValueError as exc:
        plain = describe_error(exc)
    assert plain.startswith("ValueError: plain") and "Traceback" in plain


@pytest.mark.slow
def test_a_port_that_is_no_spark_master_fails_with_the_real_cause(produced, tmp_path):
    """A listener that takes connections but is no Spark master (a wrong port):
    Spark tries to register for a minute, then gives up. The run fails saying
    so (not a bare "stopped SparkContext"), the next run in the same process
    gets a fresh context, and the real process's stdout (the JVM's included)
    is the failed run's JSON alone."""
    import os
    import subprocess
    import sys
    import threading
    from pathlib import Path

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    root = Path(__file__).resolve().parents[3]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'console.sqlite3'}",
        "VAR_DIR": str(tmp_path / "var"),
        "BROKER_STORE_DIR": str(produced[0]),
        "REPORTS_DIR": str(tmp_path / "reports"),
        "SPARK_MASTER": f"spark://127.0.0.1:{listener.getsockname()[1]}",
    }
    # The failed run through the command, then one more run in the same
    # process on a local master: its status goes to stderr, not stdout.
    script = (
        "import django, sys\n"
        "django.setup()\n"
        "from django.conf import settings\n"
        "from django.core.management import call_command\n"
        "from django.core.management.base import CommandError\n"
        "try:\n"
        "    call_command('run_report', 'topic_traffic')\n"
        "except CommandError as exc:\n"
        "    print('command:', exc, file=sys.stderr)\n"
        "settings.SPARK_MASTER = 'local[1]'\n"
        "from console.reports import services\n"
        "again = services.run_now('topic_traffic')\n"
        "print('again:', again.status, again.error, file=sys.stderr)\n"
    )
    py = sys.executable
    try:
        subprocess.run([py, "manage.py", "migrate", "--noinput", "-v0"], cwd=root,
                       env=env, check=True, timeout=120)  # fmt: skip
        done = subprocess.run(
            [py, "-c", script],
            cwd=root, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        listener.close()
        for conn in held:
            conn.close()
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)  # nothing else on stdout
    assert out["status"] == "FAILED"
    assert "took the connection but the application was stopped" in out["error"]
    assert "Traceback" not in out["error"]
    # The reason the message names is the one Spark gave in its log.
    assert "All masters are unresponsive! Giving up." in done.stderr
    assert "command: failed: topic_traffic" in done.stderr
    assert "again: SUCCEEDED" in done.stderr, done.stderr[-3000:]
