"""How a report run compares: its figures against the run before it (same
report, node and kind of window) and against the previous period of equal
length, its headline figures, and the trend of its recent runs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from console.reports.catalog import REPORTS, WINDOWS
from console.reports.failures import describe_error, ms
from console.reports.models import ReportRun

log = logging.getLogger(__name__)


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
            run.report, transform_time_range(records, None, ms(until)), params
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
