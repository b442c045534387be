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
