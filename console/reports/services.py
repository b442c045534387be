"""Report operations: request and execute runs, read results, edit schedules.

Views, the API, the Celery tasks and the management command call these; the
Spark work itself is ``console.reports.jobs`` (imported only when a run
executes, so web processes never start a JVM: they read results with pyarrow).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.utils import timezone

from console.audit.services import record_audit
from console.reports.catalog import (
    REPORTS,
    WINDOWS,
    ParamError,
    check_params,
    window_bounds,
)
from console.reports.comparisons import (
    compare_with_previous,
    compare_with_previous_period,
    previous_period,
)
from console.reports.failures import describe_error, export_damaged, ms
from console.reports.jobs import storage
from console.reports.jobs.errors import ReportInputError
from console.reports.models import ReportRun
from console.reports.results import locate_results

log = logging.getLogger(__name__)

TASK_NAME = "reports.run_report"
#: Result directories kept per report (older runs keep their history row).
KEEP_RESULTS = 20
DEFAULT_INTERVAL_MIN = 60


class UnknownReportError(ValueError):
    """No report by that name."""


class UnknownNodeError(ValueError):
    """A run or schedule names a node reports cannot cover."""


def check_name(name: str) -> str:
    """Return ``name`` if it is a report, else raise ``UnknownReportError``."""
    if name not in REPORTS:
        raise UnknownReportError(
            f"unknown report {name!r}; one of {', '.join(REPORTS)}"
        )
    return name


def cluster_mode() -> bool:
    """Whether reports read the nodes' exports (``<export>/<node>/``): this
    host is a node (``BROKER_NODE``) or the console knows the nodes that
    export (``CLUSTER_NODES``). Else one host exports at ``<export>`` itself
    (the layout from before nodes), as ``export_now`` writes it: a console
    that only shows the Cluster page (``BROKER_CLUSTER``) reports on its own
    store, as its other single-store pages do."""
    return bool(settings.BROKER_NODE or settings.CLUSTER_NODES)


def check_node(node: str) -> str:
    """Return ``node`` if a run may cover it ("": every node, or the single
    host), else raise ``UnknownNodeError``."""
    from console.reports.jobs import nodes

    if not node:
        return ""
    if not cluster_mode():
        raise UnknownNodeError(
            f"no node {node!r}: this console reports on a single host (set "
            "BROKER_CLUSTER or CLUSTER_NODES for a cluster's nodes)"
        )
    try:
        nodes.check_name(node)
    except ValueError as exc:
        raise UnknownNodeError(str(exc)) from exc
    known = list(settings.CLUSTER_NODES)
    if known and node not in known:
        raise UnknownNodeError(f"no node {node!r}; one of {', '.join(known)}")
    return node


def reports_dir() -> Path:
    return Path(settings.REPORTS_DIR)


def export_dir() -> str:
    """The incremental Parquet export of the commit log (shared by all reports):
    a directory or a URI (``REPORTS_EXPORT_URI``)."""
    return settings.REPORTS_EXPORT_URI or str(reports_dir() / "export")


def results_location(name: str, run_id: int) -> Any:
    """Where run ``run_id`` of report ``name`` writes its results: under
    ``REPORTS_RESULTS_URI`` (a directory or a URI), by default ``REPORTS_DIR``."""
    base = storage.locate(settings.REPORTS_RESULTS_URI or str(reports_dir()))
    return base.child(name, f"{run_id:08d}")


def parse_when(text: str | None) -> datetime | None:
    """Return an aware datetime for an ISO 8601 string (UTC when naive)."""
    if not text:
        return None
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


# --- runs ---------------------------------------------------------------------


def request_run(
    name: str,
    *,
    actor: Any = None,
    trigger: str = ReportRun.Trigger.MANUAL,
    since: datetime | None = None,
    until: datetime | None = None,
    skip_damaged: bool = False,
    top_n: int | None = None,
    node: str = "",
    params: dict[str, Any] | None = None,
    request: Any = None,
) -> ReportRun:
    """Queue a run of report ``name`` on the Celery worker ("run now"), over
    the whole cluster or one ``node``, with the report's ``params``
    (thresholds; ``ParamError`` for one it does not take)."""
    from console.reports.tasks import run_report_task

    check_name(name)
    check_node(node)
    params = check_params([name], params)
    user = actor.get_username() if getattr(actor, "is_authenticated", False) else ""
    run = ReportRun.objects.create(
        report=name,
        trigger=trigger,
        requested_by=user,
        since=since,
        until=until,
        skip_damaged=skip_damaged,
        top_n=top_n,
        node=node,
        params=params,
    )
    if trigger == ReportRun.Trigger.MANUAL:
        record_audit(
            actor=actor,
            action="report.run",
            object_type="report",
            object_id=name,
            after={
                "run": run.pk,
                "since": since,
                "until": until,
                "skip_damaged": skip_damaged,
                "top_n": top_n,
                "node": node,
                "params": params,
            },
            request=request,
        )
    try:
        run_report_task.apply_async(kwargs={"run_id": run.pk})
    except Exception as exc:  # broker down: the run cannot start
        _fail(run, f"could not queue the run: {exc}")
    return run


def run_options(data: dict[str, Any]) -> dict[str, Any]:
    """``request_run``'s options from a run form's or the API's cleaned data
    (absent or empty values: the defaults)."""
    return {
        "since": data.get("since"),
        "until": data.get("until"),
        "skip_damaged": bool(data.get("skip_damaged")),
        "top_n": data.get("top_n"),
        "node": data.get("node") or "",
    }


def run_now(
    name: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    trigger: str = ReportRun.Trigger.COMMAND,
    skip_damaged: bool = False,
    top_n: int | None = None,
    node: str = "",
    params: dict[str, Any] | None = None,
) -> ReportRun:
    """Run report ``name`` in this process and return the finished run."""
    check_name(name)
    check_node(node)
    run = ReportRun.objects.create(
        report=name,
        trigger=trigger,
        since=since,
        until=until,
        skip_damaged=skip_damaged,
        top_n=top_n,
        node=node,
        params=check_params([name], params),
    )
    return execute_run(run.pk)


def scheduled_run(
    name: str,
    window: str = "all",
    top_n: int | None = None,
    alert: dict[str, Any] | None = None,
    node: str = "",
    params: dict[str, Any] | None = None,
) -> ReportRun:
    """A run for beat: its rolling window's bounds fixed now; ``alert``
    ({"figure", "above"}) announces a summary figure above a threshold; a
    ``node`` no longer known, or ``params`` the report no longer takes, fail
    the run when it executes, saying so."""
    check_name(name)
    since, until = window_bounds(window if window in WINDOWS else "all", timezone.now())
    return ReportRun.objects.create(
        report=name,
        trigger=ReportRun.Trigger.SCHEDULE,
        since=since,
        until=until,
        window=window if window != "all" else "",
        top_n=top_n,
        node=node,
        params=params or {},
        alert_figure=(alert or {}).get("figure", ""),
        alert_above=(alert or {}).get("above"),
    )


def execute_run(run_id: int) -> ReportRun:
    """Execute a queued run: bring the export current, compute, store results."""
    run = ReportRun.objects.get(pk=run_id)
    run.status = ReportRun.Status.RUNNING
    run.started_at = timezone.now()
    run.worker = f"{socket.gethostname()}:{os.getpid()}"
    run.save(update_fields=["status", "started_at", "worker"])
    started = time.monotonic()
    try:
        from console.reports.jobs import reader, runner
        from console.reports.jobs.common import transform_time_range
        from console.reports.jobs.session import get_session

        check_node(run.node)
        spark = get_session(settings.SPARK_MASTER)
        # One read from the start of the period before (when the run is
        # compared with one) to the end of the window; each is filtered out.
        period = previous_period(run)
        for attempt in (1, 2):
            loaded, info = _load_records(spark, run, period[0] if period else run.since)
            records = transform_time_range(loaded, ms(run.since)) if period else loaded
            params = runner.default_params(settings.BROKER_STORE_DIR)
            params.update(_store_params())
            if "offsets" in info:  # the nodes' committed offsets, from their exports
                params["offsets"] = info.pop("offsets")
            if run.top_n:
                params["top_n"] = run.top_n
            params.update(check_params([run.report], run.params))
            out = results_location(run.report, run.pk)
            try:
                output = runner.run_report(spark, run.report, records, params, out)
                break
            except Exception as exc:
                if attempt == 2 or not export_damaged(exc) or cluster_mode():
                    raise
                # A chunk of this host's export that Spark could not decode:
                # rebuild the export from the log once, then run again.
                log.warning("report %s run %s: export damaged, rebuilding: %s",
                            run.report, run.pk, str(exc).splitlines()[0])  # fmt: skip
                reader.discard_export(export_dir())
    except SoftTimeLimitExceeded:
        run.duration_s = time.monotonic() - started
        return _fail(
            run,
            f"stopped after REPORTS_TIME_LIMIT ({settings.REPORTS_TIME_LIMIT} s); "
            "run it over a shorter window or raise the limit",
        )
    except (ReportInputError, UnknownNodeError, ParamError) as exc:
        # The input, not the code: the reason alone, no traceback.
        log.warning("report %s run %s failed: %s", run.report, run.pk, exc)
        run.duration_s = time.monotonic() - started
        return _fail(run, str(exc))
    except Exception as exc:
        log.exception("report %s run %s failed", run.report, run.pk)
        run.duration_s = time.monotonic() - started
        return _fail(run, describe_error(exc))
    # The results are written: whatever the comparison meets, the run succeeds.
    period_change = compare_with_previous_period(run, output.summary, loaded, params)
    run.status = ReportRun.Status.SUCCEEDED
    run.finished_at = timezone.now()
    run.duration_s = time.monotonic() - started
    run.log_end = info.get("log_end")
    run.input_records = (
        info["records"] if "records" in info else reader.exported_rows(export_dir())
    )
    run.rows = output.tables
    run.summary = output.summary
    if "nodes" in info:
        run.summary = dict(run.summary) | {"nodes": info["nodes"]}
    if info.get("skipped"):
        run.summary = dict(run.summary) | {
            "skipped_damaged": {
                "stretches": info["skipped"],
                "bytes": info["skipped_bytes"],
                "note": "damaged or quarantined log stretches stepped over: "
                "their records are missing from this run",
            }
        }
    run.result_dir = output.directory
    compared = compare_with_previous(run)
    if compared is not None:
        run.summary = dict(run.summary) | {"change_vs_previous_run": compared}
    if period_change is not None:
        run.summary = dict(run.summary) | {"change_vs_previous_period": period_change}
    run.save()
    if run.alert_figure and run.alert_above is not None:
        check_threshold(run, run.alert_figure, run.alert_above)
    _prune(run.report)
    return run


def _load_records(
    spark: Any, run: ReportRun, since: datetime | None
) -> tuple[Any, dict[str, Any]]:
    """The records run ``run`` reads, from ``since`` to the end of its window,
    and what was read: on a cluster, every node's export (or ``run.node``'s),
    this host's own brought up to date first; on a single host, its export
    brought up to date."""
    from console.reports.jobs import runner

    if cluster_mode():
        return runner.load_node_records(
            spark,
            export_dir(),
            node=run.node or None,
            expected=settings.CLUSTER_NODES,
            own_node=settings.BROKER_NODE,
            store_dir=settings.BROKER_STORE_DIR,
            since_ms=ms(since),
            until_ms=ms(run.until),
            skip_damaged=run.skip_damaged,
            max_age_ms=int(settings.REPORTS_EXPORT_MAX_AGE * 1000),
        )
    return runner.load_records(
        spark,
        settings.BROKER_STORE_DIR,
        export_dir=export_dir(),
        since_ms=ms(since),
        until_ms=ms(run.until),
        skip_damaged=run.skip_damaged,
    )


def _process_alive(worker: str) -> bool | None:
    """Whether the ``host:pid`` process runs (None: another host, unknown)."""
    host, _, pid = worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_runs() -> dict[str, int]:
    """Mark FAILED the runs that will never finish: RUNNING in a process that
    is gone (the worker was killed) or past the time limit with a margin, and
    QUEUED longer than the time limit (no reports worker is serving the queue).
    """
    now = timezone.now()
    limit = timedelta(seconds=settings.REPORTS_TIME_LIMIT + 120)
    dead = overdue = stale = 0
    for run in ReportRun.objects.filter(status=ReportRun.Status.RUNNING):
        if _process_alive(run.worker) is False:
            _fail(run, f"its worker process ({run.worker}) is gone: killed or crashed")
            dead += 1
        elif run.started_at is not None and now - run.started_at > limit:
            _fail(run, "still RUNNING long past REPORTS_TIME_LIMIT: its worker died")
            overdue += 1
    queued = ReportRun.objects.filter(
        status=ReportRun.Status.QUEUED, created_at__lt=now - limit
    )
    for run in queued:
        _fail(run, "never started: is a reports worker running? (Procfile: reports)")
        stale += 1
    if dead or overdue or stale:
        log.warning("reaped report runs: %d dead, %d overdue, %d never started",
                    dead, overdue, stale)  # fmt: skip
    return {"dead": dead, "overdue": overdue, "never_started": stale}


def _store_params() -> dict[str, Any]:
    """Report parameters from the broker's settings (delay levels)."""
    from broker_core.config import parse_delay_levels

    opts = getattr(settings, "BROKER_STORE_OPTIONS", {}) or {}
    levels = opts.get("message_delay_level")
    return {"delay_levels_ms": parse_delay_levels(levels)} if levels else {}


def _fail(run: ReportRun, error: str) -> ReportRun:
    run.status = ReportRun.Status.FAILED
    run.finished_at = timezone.now()
    run.error = error[:10000]
    run.save()
    alert_failure(run)
    return run


def alert_failure(run: ReportRun) -> dict[str, str]:
    """Announce a failed run (see ``_alert``)."""
    first_line = (run.error or "").strip().splitlines()[:1]
    reason = first_line[0] if first_line else "unknown"
    return _alert(
        run,
        "report.failed",
        f"run #{run.pk} failed",
        f"failed at {run.finished_at:%Y-%m-%d %H:%M:%S %Z}.\n\n{run.error}",
        {"reason": reason, "error": run.error},
    )


def check_threshold(run: ReportRun, figure: str, above: float) -> dict[str, str] | None:
    """Announce a run whose summary ``figure`` is above ``above`` (a schedule's
    threshold); None when it is not (or the figure is not a number)."""
    value = (run.summary or {}).get(figure)
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= above:
        return None
    return _alert(
        run,
        "report.threshold",
        f"{figure} = {value:,} (above {above:,})",
        f"finished with {figure} = {value:,}, above the alert threshold {above:,}.",
        {"figure": figure, "value": value, "threshold": above},
    )


def _alert(
    run: ReportRun, event: str, headline: str, text: str, extra: dict[str, Any]
) -> dict[str, str]:
    """E-mail ``REPORTS_ALERT_EMAILS`` and POST JSON to ``REPORTS_ALERT_WEBHOOK``.
    Returns what each did; an alert that cannot be sent is logged, never raised
    (the run is already recorded)."""
    import urllib.error
    import urllib.request

    from django.core.mail import send_mail

    subject = f"[broker console] report {run.report}: {headline}"
    who = f", {run.requested_by}" if run.requested_by else ""
    body = f"Report {run.report}, run #{run.pk} ({run.trigger}{who}) {text}\n"
    done: dict[str, str] = {}
    emails = list(getattr(settings, "REPORTS_ALERT_EMAILS", []) or [])
    if emails:
        try:
            send_mail(subject, body, None, emails)
            done["email"] = "sent"
        except Exception as exc:  # noqa: BLE001 - the mail server is down
            log.warning("report alert e-mail not sent: %s", exc)
            done["email"] = f"failed: {exc}"
    hook = getattr(settings, "REPORTS_ALERT_WEBHOOK", "")
    if hook:
        payload = {
            "event": event,
            "report": run.report,
            "run": run.pk,
            "trigger": run.trigger,
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
            **extra,
        }
        req = urllib.request.Request(
            hook,
            data=json.dumps(payload, default=str).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=5):  # noqa: S310 - operator's URL
                pass
            done["webhook"] = "sent"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log.warning("report alert webhook not sent: %s", exc)
            done["webhook"] = f"failed: {exc}"
    return done


def _prune(name: str) -> None:
    """Delete result directories beyond the newest ``KEEP_RESULTS`` of a report."""
    old = ReportRun.objects.filter(report=name).exclude(result_dir="")
    for run in old.order_by("-created_at", "-id")[KEEP_RESULTS:]:
        try:
            locate_results(run).remove()
        except (OSError, storage.StorageError) as exc:
            log.warning("results of run %s not removed: %s", run.pk, exc)
        run.result_dir = ""
        run.save(update_fields=["result_dir"])


def latest_run(name: str) -> ReportRun | None:
    """Return the newest successful run of ``name``."""
    return (
        ReportRun.objects.filter(report=name, status=ReportRun.Status.SUCCEEDED)
        .exclude(result_dir="")
        .first()
    )


def export_now() -> dict[str, Any]:
    """Bring the Parquet export up to the end of the log (Celery task): this
    host's node's export (``<export>/<BROKER_NODE>/``), or a single host's."""
    from console.reports.jobs import nodes, reader
    from console.reports.jobs.session import get_session

    spark = get_session(settings.SPARK_MASTER)
    store = settings.BROKER_STORE_DIR
    if settings.BROKER_NODE:
        root = storage.locate(export_dir())
        done = nodes.export_node(spark, store, root, settings.BROKER_NODE)
        return done.as_dict() | {"node": settings.BROKER_NODE}
    return reader.export_log(spark, store, export_dir()).as_dict()
