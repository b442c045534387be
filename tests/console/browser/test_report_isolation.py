"""Reports cannot starve the broker, as an operator sees it: the console, Celery
and Spark run as the Procfile deploys them (gunicorn; a "timers" worker for the
check, delay delivery and heartbeat; a "reports" worker for Spark; beat), an
operator starts all four reports from their pages in Chromium while twenty
timers fall due, and the timers are delivered as punctually as on an idle
system while the runs page shows the reports running and then finished. The
finished reports are then read as an analyst would: charts drawn under the
Content-Security-Policy, the summary as figures, tables that sort and filter,
every report page within a 1,440 px screen."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
import redis

from broker_core import Broker, Message
from broker_core.schedule import install_send_hook
from tests.console.conftest import PASSWORD, open_page
from tests.support import free_port as _free_port
from tests.support import redis_db

pytestmark = [
    pytest.mark.browser,
    pytest.mark.services,
    pytest.mark.spark,
    pytest.mark.slow,
]

TIMERS = 20
TOPIC = "PunctualTimers"
REDIS_URL = redis_db(13)


def _manage(env: dict, *args: str) -> str:
    from tests.conftest import ROOT

    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


def _delivered(b: Broker) -> list:
    cfg = b.store.topic_config(TOPIC)
    out = []
    for q in range(cfg.queue_nums if cfg else 0):
        off = 0
        while True:
            r = b.pull("probe", TOPIC, q, off, max_messages=64)
            out += r.messages
            if r.next_offset == off:
                break
            off = r.next_offset
    return out


def _gunicorn(env: dict, tmp_path) -> tuple[subprocess.Popen, str]:
    """The console's web process as the Procfile starts it."""
    from tests.conftest import ROOT

    port = _free_port()
    log = open(tmp_path / "web.log", "w")  # noqa: SIM115 - closed by the caller
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "console.wsgi:application",
         "-c", "python:console.gunicorn_conf"],
        cwd=ROOT, env={**env, "WEB_LISTEN": f"127.0.0.1:{port}", "WEB_WORKERS": "1"},
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    proc.log = log  # type: ignore[attr-defined]
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            assert proc.poll() is None, (tmp_path / "web.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "gunicorn did not start"
            time.sleep(0.2)
    return proc, f"http://127.0.0.1:{port}"


def test_reports_started_in_the_console_do_not_delay_timers(
    chromium, celery_services, tmp_path
) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    store = tmp_path / "store"
    web = None
    try:
        celery_services.start(
            REDIS_URL,
            ["-Q", "timers,celery", "--concurrency", "2", "-n", "timers@%h"],
            more_workers={
                "reports": ["-Q", "reports", "--concurrency", "1", "-n", "reports@%h"]
            },
            BROKER_STORE_DIR=str(store),
            DELAY_TICK_INTERVAL="1",
            REPORTS_EXPORT_INTERVAL="0",
            SPARK_MASTER="local[2]",
            ALLOWED_HOSTS="127.0.0.1",
        )
        env = celery_services.env
        _manage(env, "seed_demo", "--messages", "3000")
        _manage(env, "collectstatic", "--noinput", "-v0")
        _manage(
            env, "shell", "-c",
            "from django.contrib.auth import get_user_model\n"
            "from console.ui.roles import set_role\n"
            "u = get_user_model().objects.create_user("
            f"'oncall', password={PASSWORD!r})\n"
            "set_role(u, 'operator')",
        )  # fmt: skip
        web, base_url = _gunicorn(env, tmp_path)
        with Broker.open(store) as b, open_page(chromium, base_url) as page:
            page.goto("/login/")
            page.fill("input[name=username]", "oncall")
            page.fill("input[name=password]", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_selector("[data-testid=role-badge]")

            install_send_hook(b)  # TIMER_DELIVER_MS parks the message
            b.create_topic(TOPIC, 2)
            start = int(time.time() * 1000)
            for i in range(TIMERS):
                due = start + 10_000 + i * 1000
                b.send(
                    Message(
                        TOPIC, str(due).encode(),
                        properties={"TIMER_DELIVER_MS": str(due)},
                    )
                )  # fmt: skip
            # The operator starts all four reports while the timers fall due.
            page.goto("/reports/")
            buttons = page.get_by_role("button", name="Run now")
            assert buttons.count() == 4
            for i in range(4):
                page.goto("/reports/")
                page.get_by_role("button", name="Run now").nth(i).click()
                assert "queued" in page.locator(".flash").inner_text()
            deadline = time.monotonic() + 150
            got = _delivered(b)
            while len(got) < TIMERS and time.monotonic() < deadline:
                time.sleep(0.5)
                got = _delivered(b)
            # The reports page shows the runs; wait for them to finish.
            statuses: list[str] = []
            while time.monotonic() < deadline:
                page.goto("/reports/")
                statuses = page.locator(
                    "[data-testid=reports] .status"
                ).all_inner_texts()
                if len(statuses) == 4 and not {"QUEUED", "RUNNING"} & set(statuses):
                    break
                time.sleep(2)
            # A finished report draws its charts (console.js, under the CSP)
            # and shows its summary as labelled figures.
            page.goto("/reports/topic_traffic/")
            page.wait_for_selector("#chart-1")
            drawn = page.evaluate(
                "() => !!(window.Chart && window.Chart.getChart("
                "document.getElementById('chart-1')))"
            )
            figures = page.locator("[data-testid=summary] dt").all_inner_texts()
            # Result tables sort by a header click and filter by text.
            page.goto("/reports/topic_traffic/")
            table = page.locator("#rows-body_sizes")
            rows_before = table.locator("tbody tr").count()
            table.locator("thead th", has_text="messages").click()
            sorted_asc = table.locator("thead th", has_text="messages").get_attribute(
                "aria-sort"
            )
            page.fill("input[data-filter-table=rows-body_sizes]", "zzz-nothing")
            hidden = table.locator("tbody tr:visible").count()
            # Every report page fits a 1,440 px screen (wide tables scroll inside).
            page.set_viewport_size({"width": 1440, "height": 900})
            widths = {}
            for report in ("transaction_outcomes", "delay_punctuality",
                           "topic_traffic", "consumer_lag"):  # fmt: skip
                page.goto(f"/reports/{report}/")
                widths[report] = page.evaluate(
                    "() => document.documentElement.scrollWidth"
                )
        runs = [
            line.split("\t")
            for line in _manage(
                env, "shell", "-c",
                "from console.reports.models import ReportRun\n"
                "for r in ReportRun.objects.all():\n"
                "    print(r.report, r.status,"
                " r.started_at and r.started_at.timestamp(),"
                " r.finished_at and r.finished_at.timestamp(), sep='\\t')",
            ).strip().splitlines()
            if line.count("\t") == 3  # not the shell's banner
        ]  # fmt: skip
    finally:
        if web is not None:
            web.terminate()
            web.wait(timeout=20)
            web.log.close()
        celery_services.stop()
        client.flushdb()
    assert len(got) == TIMERS, celery_services.log("worker")[-3000:]
    late_ms = sorted(m.store_timestamp - int(m.body) for m in got)
    # The four runs were started by the operator (audited as such) and really
    # ran while the timers fell due.
    first_due = (start + 10_000) / 1000
    last_due = (start + 10_000 + TIMERS * 1000) / 1000
    assert len(runs) == 4, runs
    busy = [
        r for r in runs
        if r[2] != "None" and float(r[2]) < last_due
        and (float(r[3]) if r[3] != "None" else 1e12) > first_due
    ]  # fmt: skip
    assert busy, (runs, celery_services.log("reports")[-3000:])
    assert statuses == ["SUCCEEDED"] * 4, (statuses, runs)
    assert drawn, "the report's chart was not drawn"
    assert "Messages" in figures
    assert all(w <= 1440 for w in widths.values()), widths
    assert rows_before > 0 and sorted_asc == "ascending" and hidden == 0
    # Delivery runs every second (DELAY_TICK_INTERVAL): late by under a tick
    # plus scheduling noise, never by a report's duration.
    assert late_ms[0] >= 0 and late_ms[-1] < 2500, late_ms
