"""``manage.py run_report NAME... | --all [--since ISO --until ISO --node N]``: run
reports now, in this process (one warm Spark session for all of them)."""

from __future__ import annotations

import json
import logging
import sys

from django.core.management.base import BaseCommand, CommandError

from console.reports import services
from console.reports.catalog import REPORTS, check_params, params_for
from console.reports.models import ReportRun


class Command(BaseCommand):
    help = (
        "Run Spark reports at once and print each run as JSON on stdout (one "
        "object, or a list with several reports); failures go to stderr."
    )

    def add_arguments(self, parser):
        parser.add_argument("names", nargs="*", help=", ".join(REPORTS))
        parser.add_argument("--all", action="store_true", help="every report")
        parser.add_argument("--since", help="ISO 8601 (UTC if no zone)")
        parser.add_argument("--until", help="ISO 8601 (UTC if no zone)")
        parser.add_argument("--top-n", type=int, default=None)
        parser.add_argument(
            "--node", default="", help="a cluster node (default: every node)"
        )
        parser.add_argument(
            "--param",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="a report parameter (threshold), e.g. late_after_ms=500; "
            "repeatable; each report takes the ones it knows",
        )
        parser.add_argument(
            "--skip-damaged",
            action="store_true",
            help="report on the rest of a log with damaged records",
        )

    def handle(self, *args, names, all=False, since=None, until=None, **options):
        _logs_to_stderr()
        names = list(REPORTS) if all else names
        if not names:
            raise CommandError("name a report, or give --all")
        unknown = [n for n in names if n not in REPORTS]
        if unknown:
            raise CommandError(
                f"no report {', '.join(unknown)} (reports: {', '.join(REPORTS)})"
            )
        try:
            since_dt, until_dt = services.parse_when(since), services.parse_when(until)
        except ValueError as exc:
            raise CommandError(f"bad date: {exc}") from exc
        if since_dt and until_dt and since_dt >= until_dt:
            raise CommandError("--since must be before --until")
        try:
            node = services.check_node(options.get("node") or "")
        except services.UnknownNodeError as exc:
            raise CommandError(str(exc)) from exc
        try:
            given = dict(_pair(text) for text in options.get("param") or [])
            params = check_params(names, given)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        outs, failed = [], []
        for name in names:
            run = services.run_now(
                name,
                since=since_dt,
                until=until_dt,
                top_n=options.get("top_n"),
                skip_damaged=options.get("skip_damaged", False),
                node=node,
                params=params_for(name, params),
            )
            out = {
                "report": run.report,
                "run": run.pk,
                "status": run.status,
                "duration_s": round(run.duration_s or 0, 3),
                "since": since_dt.isoformat() if since_dt else None,
                "until": until_dt.isoformat() if until_dt else None,
                "node": run.node,
                "params": run.params,
                "rows": run.rows,
                "summary": run.summary,
                "result_dir": run.result_dir,
            }
            if run.status != ReportRun.Status.SUCCEEDED:
                out["error"] = run.error
                failed.append(name)
                self.stderr.write(f"report {name} failed: {run.error}")
            outs.append(out)
        data = outs[0] if len(outs) == 1 else outs
        self.stdout.write(json.dumps(data, indent=1, default=str))
        if failed:
            raise CommandError(f"failed: {', '.join(failed)}")


def _logs_to_stderr() -> None:
    """Keep stdout for the JSON: the console's log lines go to stderr here."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)


def _pair(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` of ``--param`` (checked by ``catalog.check_params``)."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--param {text!r}: expected NAME=VALUE")
    return name.strip(), value.strip()
