"""Runs that can never finish are marked FAILED, not left RUNNING forever."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from console.reports.models import ReportRun
from console.reports.services import reap_runs

pytestmark = pytest.mark.django_db


def test_the_reaper_fails_dead_overdue_and_never_started_runs(settings) -> None:
    settings.REPORTS_TIME_LIMIT = 60
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a real process id that no longer exists
    host = socket.gethostname()
    now = timezone.now()
    S = ReportRun.Status
    killed = ReportRun.objects.create(
        report="topic_traffic", trigger="manual", status=S.RUNNING,
        started_at=now, worker=f"{host}:{gone.pid}",
    )  # fmt: skip
    alive = ReportRun.objects.create(
        report="topic_traffic", trigger="manual", status=S.RUNNING,
        started_at=now, worker=f"{host}:{os.getpid()}",
    )  # fmt: skip
    elsewhere = ReportRun.objects.create(
        report="topic_traffic", trigger="manual", status=S.RUNNING,
        started_at=now - timedelta(hours=1), worker="other-host:1",
    )  # fmt: skip
    waiting = ReportRun.objects.create(report="topic_traffic", trigger="manual")
    ReportRun.objects.filter(pk=waiting.pk).update(created_at=now - timedelta(hours=1))
    assert reap_runs() == {"dead": 1, "overdue": 1, "never_started": 1}
    for run in (killed, alive, elsewhere, waiting):
        run.refresh_from_db()
    assert killed.status == S.FAILED and "is gone" in killed.error
    assert alive.status == S.RUNNING
    assert elsewhere.status == S.FAILED and "REPORTS_TIME_LIMIT" in elsewhere.error
    assert waiting.status == S.FAILED and "reports worker" in waiting.error


def test_a_failed_run_is_announced_by_mail_and_webhook(settings, mailoutbox) -> None:
    """A killed run, once reaped, reaches the on-call: an e-mail (Django's mail
    settings) and a JSON POST to a real HTTP server standing in for a chat
    webhook; a webhook that is down is logged, not raised."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    got: list[dict] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.REPORTS_ALERT_EMAILS = ["oncall@example.com"]
    settings.REPORTS_ALERT_WEBHOOK = f"http://127.0.0.1:{server.server_port}/hook"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    run = ReportRun.objects.create(
        report="consumer_lag", trigger="schedule", status=ReportRun.Status.RUNNING,
        started_at=timezone.now(), worker=f"{socket.gethostname()}:{gone.pid}",
    )  # fmt: skip
    try:
        assert reap_runs()["dead"] == 1
    finally:
        server.shutdown()
        server.server_close()
    (mail,) = mailoutbox
    assert mail.to == ["oncall@example.com"]
    assert f"report consumer_lag: run #{run.pk} failed" in mail.subject
    assert "worker process" in mail.body
    (hook,) = got
    assert hook["event"] == "report.failed" and hook["run"] == run.pk
    assert "worker process" in hook["reason"]

    from console.reports.services import alert_failure

    run.refresh_from_db()
    settings.REPORTS_ALERT_WEBHOOK = f"http://127.0.0.1:{server.server_port}/hook"
    assert alert_failure(run)["webhook"].startswith("failed")  # the server is gone
