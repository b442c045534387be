"""Report operations: request and execute runs, read results, edit schedules.

Views, the API, the Celery tasks and the management command call these; the
Spark work itself is ``console.reports.jobs`` (imported only when a run
executes, so web processes never start a JVM: they read results with pyarrow).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import socket
import time
import traceback
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from console.audit.services import record_audit
from console.reports.catalog import (
    REPORTS,
    WINDOWS,
    ParamError,
    check_params,
    window_bounds,
)
from console.reports.jobs import storage
from console.reports.jobs.errors import ReportInputError
from console.reports.models import ReportRun

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


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


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


def _numbers(summary: dict[str, Any]) -> dict[str, float]:
    """The summary's figures that are numbers: top level, and one level down
    as ``outer.inner`` (the transaction states, say)."""
    out: dict[str, float] = {}
    for key, value in (summary or {}).items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            out[key] = value
        elif isinstance(value, dict) and not key.startswith("change_vs_"):
            for inner, number in value.items():
                if isinstance(number, int | float) and not isinstance(number, bool):
                    out[f"{key}.{inner}"] = number
    return out


def figure_changes(now: dict[str, Any], before: dict[str, Any]) -> dict[str, float]:
    """The change of each number figure: those present in both summaries, and
    the inner ones (``states.ROLLED_BACK``) present in one only, which count
    as zero on the other side (a state that dropped to none, or appeared)."""
    a, b = _numbers(now), _numbers(before)
    keys = [k for k in a if k in b or "." in k]
    keys += [k for k in b if k not in a and "." in k]
    return {key: a.get(key, 0) - b.get(key, 0) for key in keys}


def _previous_runs(run: ReportRun, **match: Any) -> Iterator[ReportRun]:
    """Earlier successful runs of the same report, node and parameters,
    newest first (``match``: further field filters)."""
    return iter(
        ReportRun.objects.filter(
            report=run.report,
            node=run.node,
            params=run.params or {},
            status=ReportRun.Status.SUCCEEDED,
            created_at__lt=run.created_at,
            **match,
        )
        .exclude(pk=run.pk)
        .order_by("-created_at", "-pk")[:50]
    )


def _over_dates(run: ReportRun) -> bool:
    """Whether ``run`` covers dates of its own (not a schedule's window)."""
    return not run.window and (run.since is not None or run.until is not None)


def _same_window_kind(run: ReportRun) -> dict[str, Any]:
    """Field filters for the runs over the same kind of window as ``run``:
    the same rolling window, the whole log, or dates of their own."""
    if run.window:
        return {"window": run.window}
    return {
        "window": "",
        "since__isnull": run.since is None,
        "until__isnull": run.until is None,
    }


def compare_with_previous(run: ReportRun) -> dict[str, Any] | None:
    """The change of each figure since the previous successful run over the
    same window: a schedule's rolling window, or the whole log (None for a
    run over dates of its own: ``previous_period`` compares those)."""
    if _over_dates(run):
        return None
    prev = next(_previous_runs(run, **_same_window_kind(run)), None)
    if prev is None:
        return None
    changes = figure_changes(run.summary, prev.summary)
    return {"run": prev.pk, "window": WINDOWS[run.window or "all"], "changes": changes}


def previous_period(run: ReportRun) -> tuple[datetime, datetime] | None:
    """The period just before a run's bounded window, as long as it (None for
    an open or empty window, or a report not compared that way)."""
    if run.since is None or run.until is None or run.until <= run.since:
        return None
    if not REPORTS[run.report].period_comparison:
        return None
    return run.since - (run.until - run.since), run.since


def _run_over(run: ReportRun, since: datetime, until: datetime) -> ReportRun | None:
    """An earlier run like ``run`` over ``since``-``until``: exactly, or within
    a minute (at most 1% of the span) at each end, as a rolling window's runs
    drift by the seconds their start took."""
    slack = min(timedelta(minutes=1), (until - since) / 100)
    return next(
        _previous_runs(
            run,
            since__range=(since - slack, since + slack),
            until__range=(until - slack, until + slack),
        ),
        None,
    )


def compare_with_previous_period(
    run: ReportRun, summary: dict[str, Any], records: Any, params: dict[str, Any]
) -> dict[str, Any] | None:
    """The change of each figure of ``summary`` (run ``run``'s) against the
    period just before the run's window (same length): from a run that covered
    that period, else computed now from ``records`` (read by the run from
    that period's start on; summary only, nothing written)."""
    period = previous_period(run)
    if period is None:
        return None
    since, until = period
    out: dict[str, Any] = {"since": since.isoformat(), "until": until.isoformat()}
    prev = _run_over(run, since, until)
    if prev is not None:
        return out | {"run": prev.pk, "changes": figure_changes(summary, prev.summary)}
    from console.reports.jobs import runner
    from console.reports.jobs.common import transform_time_range

    try:
        before = runner.summarize_report(
            run.report, transform_time_range(records, None, _ms(until)), params
        )
    except SoftTimeLimitExceeded:  # the run's own results are written: keep them
        return out | {"error": "not compared: REPORTS_TIME_LIMIT came first"}
    except Exception as exc:  # the run itself succeeded: say why, keep it
        log.exception("report %s run %s: previous period", run.report, run.pk)
        return out | {"error": f"not compared: {describe_error(exc)[:500]}"}
    return out | {"changes": figure_changes(summary, before)}


def headline(run: ReportRun | None) -> list[dict[str, Any]]:
    """The report's headline figures of ``run`` (``ReportInfo.headline``), each
    with its change against the period before (else the previous run) and
    what that change is against ("" when there is none)."""
    if run is None:
        return []
    numbers = _numbers(run.summary)
    summary = run.summary or {}
    versus, changes = "", {}
    for key, label in (
        ("change_vs_previous_period", "the period before"),
        ("change_vs_previous_run", "the previous run"),
    ):
        if (summary.get(key) or {}).get("changes"):
            versus, changes = label, summary[key]["changes"]
            break
    info = REPORTS[run.report]
    return [
        {
            "label": info.labels.get(key)
            or key.rsplit(".", 1)[-1].replace("_", " ").lower(),
            "value": numbers[key],
            "change": changes.get(key),
            "versus": versus if key in changes else "",
        }
        for key in info.headline
        if key in numbers
    ]


def trend(run: ReportRun, limit: int = 12) -> dict[str, Any]:
    """The number figures of the last ``limit`` successful runs like ``run``
    (same report, node, parameters and window kind), oldest first: the
    trend across runs shown on the report's page."""
    runs = [run]
    # Runs over dates of their own: those over a window as long.
    span = (
        run.until - run.since if _over_dates(run) and run.since and run.until else None
    )
    for prev in _previous_runs(run, **_same_window_kind(run)):
        if span is not None and (
            prev.since is None or prev.until is None or prev.until - prev.since != span
        ):
            continue
        runs.append(prev)
        if len(runs) == limit:
            break
    runs.reverse()
    figures = [_numbers(r.summary) for r in runs]
    keys = [k for k in figures[-1] if all(k in f for f in figures)]
    return {
        "runs": [
            {
                "run": r.pk,
                "finished_at": r.finished_at,
                "since": r.since,
                "until": r.until,
            }
            for r in runs
        ],
        "figures": keys,
        "rows": [[f[k] for k in keys] for f in figures],
    }


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
            records = transform_time_range(loaded, _ms(run.since)) if period else loaded
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
            since_ms=_ms(since),
            until_ms=_ms(run.until),
            skip_damaged=run.skip_damaged,
            max_age_ms=int(settings.REPORTS_EXPORT_MAX_AGE * 1000),
        )
    return runner.load_records(
        spark,
        settings.BROKER_STORE_DIR,
        export_dir=export_dir(),
        since_ms=_ms(since),
        until_ms=_ms(run.until),
        skip_damaged=run.skip_damaged,
    )


#: What Spark's Parquet reader says of a file it cannot decode.
_PARQUET_DAMAGE = (
    "ParquetDecodingException",
    "Couldn't deserialize thrift",
    "is not a Parquet file",
    "CorruptedParquet",
    "Could not read footer",
    "can not read class org.apache.parquet",
)


def export_damaged(exc: BaseException) -> bool:
    """Whether a run failed because a Parquet file of the export is damaged.

    Spark's errors reach Python as text only (a JVM exception wrapped by
    py4j), so this is the one place that reads an error's message."""
    text = str(exc)
    return any(marker in text for marker in _PARQUET_DAMAGE)


def describe_error(exc: BaseException) -> str:
    """What a failed run stores: a Spark (JVM) error once, cut to its first
    lines (its Java stack is already in the message); any other error with
    the last frames of its Python traceback."""
    text = str(exc).strip()
    if type(exc).__module__.startswith(("py4j", "pyspark")):
        lines = [line for line in text.splitlines() if line.strip()]
        head = "\n".join(lines[:12])
        more = f"\n... ({len(lines) - 12} more lines in the worker's log)"
        return f"{type(exc).__name__}: {head}{more if len(lines) > 12 else ''}"
    return f"{type(exc).__name__}: {text}\n{traceback.format_exc(-3)}"


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
            _results(run).remove()
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


# --- results (pyarrow only: no JVM in web processes) ----------------------------


def _results(run: ReportRun) -> Any:
    """The ``storage.Location`` of a run's results (a directory or a URI)."""
    return storage.locate(run.result_dir)


def _read(run: ReportRun, table: str) -> Any:
    """A whole result table (``pyarrow.Table``), wherever the results live."""
    import pyarrow.parquet as pq

    if not run.result_dir or table not in (run.rows or {}):
        raise FileNotFoundError(f"run {run.pk} has no table {table!r}")
    where = _results(run).child(f"{table}.parquet")
    return pq.read_table(where.path, filesystem=where.fs)


def _cell(value: Any) -> Any:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.isoformat(timespec="seconds")
    return value


def read_arrow(run: ReportRun, table: str) -> Any:
    """The whole result table as a ``pyarrow.Table`` (charts aggregate it)."""
    return _read(run, table)


def read_table(
    run: ReportRun, table: str, limit: int = 200, offset: int = 0
) -> tuple[list[str], list[list[Any]]]:
    """Return the column names and up to ``limit`` rows of a result table."""
    data = _read(run, table)
    part = data.slice(offset, limit).to_pylist()
    columns = data.column_names
    return columns, [[_cell(row[c]) for c in columns] for row in part]


def table_csv(run: ReportRun, table: str) -> Iterator[str]:
    """Yield a result table as CSV text, a batch of rows at a time."""
    data = _read(run, table)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(data.column_names)
    for batch in data.to_batches(max_chunksize=5000):
        for row in batch.to_pylist():
            writer.writerow([_cell(v) for v in row.values()])
        yield buf.getvalue()
        buf.seek(0)
        buf.truncate()
    yield buf.getvalue()


def table_json(run: ReportRun, table: str) -> Iterator[str]:
    """Yield a result table as JSON lines (one object per row; times as ISO
    8601 with their zone), a batch of rows at a time."""
    data = _read(run, table)
    for batch in data.to_batches(max_chunksize=5000):
        yield "".join(
            json.dumps({k: _cell(v) for k, v in row.items()}, default=str) + "\n"
            for row in batch.to_pylist()
        )


def table_parquet(run: ReportRun, table: str) -> bytes:
    """A result table as one Parquet file (zstd), its types kept."""
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(_read(run, table), buf, compression="zstd")
    return buf.getvalue()


# --- schedules (django-celery-beat) ------------------------------------------------


def schedule_name(name: str) -> str:
    return f"report: {name}"


def ensure_schedules() -> dict[str, PeriodicTask]:
    """Return each report's beat entry, creating missing ones (disabled, hourly)."""
    out = {}
    for name in REPORTS:
        task = PeriodicTask.objects.filter(name=schedule_name(name)).first()
        if task is None:
            every, _ = IntervalSchedule.objects.get_or_create(
                every=DEFAULT_INTERVAL_MIN, period=IntervalSchedule.MINUTES
            )
            task = PeriodicTask.objects.create(
                name=schedule_name(name),
                task=TASK_NAME,
                interval=every,
                kwargs=json.dumps({"name": name}),
                enabled=False,
                description=REPORTS[name].title,
            )
        out[name] = task
    return out


def schedule_minutes(task: PeriodicTask) -> int | None:
    if task.interval is None:
        return None
    factor = {"days": 1440, "hours": 60, "minutes": 1, "seconds": 1 / 60}
    return int(task.interval.every * factor.get(task.interval.period, 1))


def schedule_window(task: PeriodicTask) -> str:
    """The rolling window a schedule's runs cover ("all": the whole log)."""
    try:
        window = json.loads(task.kwargs or "{}").get("window", "all")
    except ValueError:
        return "all"
    return window if window in WINDOWS else "all"


def update_schedule(
    name: str,
    *,
    enabled: bool,
    every_minutes: int,
    actor: Any,
    window: str = "all",
    top_n: int | None = None,
    alert: dict[str, Any] | None = None,
    node: str = "",
    params: dict[str, Any] | None = None,
    request: Any = None,
) -> PeriodicTask:
    """Enable/disable report ``name``'s scheduled runs, set their interval,
    the rolling window each covers, the node (""; the whole cluster) and the
    report's parameters."""
    check_name(name)
    check_node(node)
    params = check_params([name], params)
    if window not in WINDOWS:
        raise ValueError(f"unknown window {window!r}")
    task = ensure_schedules()[name]
    before = {
        "enabled": task.enabled,
        "every_minutes": schedule_minutes(task),
        "window": schedule_window(task),
    }
    every, _ = IntervalSchedule.objects.get_or_create(
        every=every_minutes, period=IntervalSchedule.MINUTES
    )
    task.interval = every
    task.crontab = None
    task.enabled = enabled
    kwargs: dict[str, Any] = {"name": name, "window": window}
    if top_n:
        kwargs["top_n"] = top_n
    if node:
        kwargs["node"] = node
    if params:
        kwargs["params"] = params
    if alert and alert.get("figure") and alert.get("above") is not None:
        kwargs["alert"] = {"figure": alert["figure"], "above": alert["above"]}
    task.kwargs = json.dumps(kwargs)
    # A run that waited longer than its interval is dropped, not run late.
    task.expires_seconds = every_minutes * 60
    task.save()
    record_audit(
        actor=actor,
        action="report.schedule",
        object_type="report",
        object_id=name,
        before=before,
        after={
            "enabled": enabled,
            "every_minutes": every_minutes,
            "window": window,
            "top_n": top_n,
            "node": node,
            "params": params,
            "alert": kwargs.get("alert"),
        },
        request=request,
    )
    return task
