"""``manage.py run_report NAME [--since ISO --until ISO]``: run one report now."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from console.reports import services
from console.reports.catalog import REPORTS
from console.reports.models import ReportRun


class Command(BaseCommand):
    help = "Run a Spark report at once and print its summary as JSON."

    def add_arguments(self, parser):
        parser.add_argument("name", choices=list(REPORTS))
        parser.add_argument("--since", help="ISO 8601 (UTC if no zone)")
        parser.add_argument("--until", help="ISO 8601 (UTC if no zone)")

    def handle(self, *args, name, since=None, until=None, **options):
        try:
            since_dt, until_dt = services.parse_when(since), services.parse_when(until)
        except ValueError as exc:
            raise CommandError(f"bad date: {exc}") from exc
        run = services.run_now(name, since=since_dt, until=until_dt)
        out = {
            "report": run.report,
            "run": run.pk,
            "status": run.status,
            "duration_s": round(run.duration_s or 0, 3),
            "since": since_dt.isoformat() if since_dt else None,
            "until": until_dt.isoformat() if until_dt else None,
            "rows": run.rows,
            "summary": run.summary,
            "result_dir": run.result_dir,
        }
        if run.status != ReportRun.Status.SUCCEEDED:
            out["error"] = run.error
        self.stdout.write(json.dumps(out, indent=1, default=str))
        if run.status != ReportRun.Status.SUCCEEDED:
            raise CommandError(f"report {name} failed")
