"""Report pages: the list with schedules and latest runs, one page per report
(summary, charts, tables, history), run now, schedule edits, CSV downloads."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from console.reports import comparisons, services
from console.reports import results as report_results
from console.reports import schedules as report_schedules
from console.reports.catalog import REPORTS, WINDOWS, Chart
from console.reports.forms import RunForm, ScheduleForm
from console.reports.models import ReportRun
from console.ui.permissions import operator_required, viewer_required

ROWS = 100  # rows of a table shown on the page (the CSV has all)
DETAIL_ROWS = 20
#: The most x values and series a chart draws (the latest; the largest).
CHART_POINTS = 2000
CHART_SERIES = 12


def _info(name: str):
    try:
        return REPORTS[name]
    except KeyError:
        raise Http404(f"no report {name!r}") from None


@viewer_required
def report_list(request: HttpRequest) -> HttpResponse:
    schedules = report_schedules.ensure_schedules()
    rows = []
    for name, info in REPORTS.items():
        task = schedules[name]
        rows.append(
            {
                "info": info,
                "latest": (latest := services.latest_run(name)),
                "headline": [
                    h | {"change": _signed(h["change"])}
                    for h in comparisons.headline(latest)
                ],
                "last": ReportRun.objects.filter(report=name).first(),
                "schedule": task,
                "every": report_schedules.schedule_minutes(task),
            }
        )
    recent = ReportRun.objects.all()[:20]
    # The list refreshes itself while a run is queued or running.
    active = ReportRun.objects.filter(
        status__in=[ReportRun.Status.QUEUED, ReportRun.Status.RUNNING]
    ).exists()
    return render(
        request,
        "reports/list.html",
        {"rows": rows, "recent": recent, "active": active},
    )


def _chart_data(run: ReportRun, chart: Chart) -> dict[str, Any] | None:
    try:
        table = report_results.read_arrow(run, chart.table)
    except (FileNotFoundError, OSError):
        return None
    return chart_series(table, chart)


def chart_series(table: Any, chart: Chart) -> dict[str, Any] | None:
    """A chart's labels and datasets from its whole result table.

    Rows that share an x value (and series) are combined with ``chart.agg``
    (the sum of counts across groups, topics, tags...; the maximum of
    percentiles); an hourly x axis has every hour between the first and the
    last, empty ones 0 for counts (None, a gap, for percentiles); at most
    ``CHART_POINTS`` x values (the latest) and ``CHART_SERIES`` series (the
    largest) are drawn, with a note saying so."""
    import pyarrow as pa

    columns = table.column_names
    ys = [y for y in chart.y if y in columns]
    if chart.x not in columns or table.num_rows == 0 or not ys:
        return None
    series = chart.series if chart.series in columns else None
    keys = [chart.x] + ([series] if series else [])
    grouped = (
        table.select(keys + ys).group_by(keys).aggregate([(y, chart.agg) for y in ys])
    )
    rows = grouped.to_pylist()
    ycol = {y: f"{y}_{chart.agg}" for y in ys}
    xs = sorted({r[chart.x] for r in rows if r[chart.x] is not None})
    if chart.x_order:  # e.g. "<=10 ms" before "<=1 s", not as text
        rank = {v: i for i, v in enumerate(chart.x_order)}
        xs.sort(key=lambda v: (rank.get(v, len(rank)), v))
    hourly = pa.types.is_timestamp(table.schema.field(chart.x).type)
    if hourly and xs:
        hours, t = [], xs[0]
        while t <= xs[-1] and len(hours) <= 24 * 366:
            hours.append(t)
            t += timedelta(hours=1)
        xs = hours
    notes = []
    if len(xs) > CHART_POINTS:
        notes.append(f"the latest {CHART_POINTS:,} of {len(xs):,} points")
        xs = xs[-CHART_POINTS:]
    empty = 0 if chart.agg == "sum" else None
    datasets = []
    if series:
        by: dict[str, dict[Any, Any]] = {}
        for r in rows:
            by.setdefault(str(r[series]), {})[r[chart.x]] = r[ycol[ys[0]]]
        ranked = sorted(by, key=lambda k: -sum(v or 0 for v in by[k].values()))
        if len(ranked) > CHART_SERIES:
            notes.append(f"the {CHART_SERIES} largest of {len(ranked)} {series}s")
        for name in ranked[:CHART_SERIES]:
            points = by[name]
            datasets.append({"label": name, "data": [points.get(x, empty) for x in xs]})
    else:
        for y in ys:
            points = {r[chart.x]: r[ycol[y]] for r in rows}
            datasets.append({"label": y, "data": [points.get(x, empty) for x in xs]})
    return {
        "title": chart.title,
        "type": chart.kind,
        "labels": [
            x.strftime("%Y-%m-%d %H:%M") if isinstance(x, datetime) else str(x)
            for x in xs
        ],
        "datasets": datasets,
        "note": ("Showing " + "; ".join(notes) + ".") if notes else "",
        "time_axis": hourly,
    }


def _times(columns: list[str], rows: list[list[Any]]) -> list[list[Any]]:
    """Epoch-millisecond columns (``*_ts``) as aware times, shown with their
    zone and age; ISO strings from timestamp columns likewise."""
    at = [i for i, c in enumerate(columns) if c.endswith("_ts") or c == "hour"]
    if not at:
        return rows
    out = []
    for row in rows:
        row = list(row)
        for i in at:
            v = row[i]
            if isinstance(v, int) and v > 0:
                row[i] = datetime.fromtimestamp(v / 1000, UTC)
            elif isinstance(v, str) and "T" in v:
                try:
                    row[i] = datetime.fromisoformat(v)
                except ValueError:
                    pass
        out.append(row)
    return out


def _signed(value: Any) -> Any:
    """A change with its sign (``+1,204``, ``-3.5``, ``0``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if isinstance(value, float) and not value.is_integer():
        return f"{value:+,.3f}".rstrip("0").rstrip(".")
    return f"{int(value):+,}" if value else "0"


def figures(
    summary: dict[str, Any], depth: int = 0, labels: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """A summary as labelled figures: [{label, value, depth}] (nested dicts
    indented under their label; lists of rows kept as short text).

    Only the top level's keys are the job's field names, shown as words;
    nested keys are shown as they are: they are often data (topic and group
    names such as ``TxOrders`` or ``%DLQ%grp``, whose case matters)."""
    out: list[dict[str, Any]] = []
    for key, value in (summary or {}).items():
        label = str(key).replace("_", " ").capitalize() if depth == 0 else str(key)
        if depth == 0 and labels and key in labels:
            label = labels[key][:1].upper() + labels[key][1:]
        if key == "changes" and isinstance(value, dict):  # signed: +2, -1.5
            out.append({"label": label, "value": None, "depth": depth})
            out += [
                {"label": k, "value": _signed(v), "depth": depth + 1}
                for k, v in value.items()
            ]
        elif isinstance(value, dict):
            out.append({"label": label, "value": None, "depth": depth})
            out += figures(value, depth + 1)
        elif isinstance(value, list):
            text = "; ".join(
                ", ".join(f"{k} {v}" for k, v in x.items())
                if isinstance(x, dict)
                else str(x)
                for x in value[:10]
            )
            more = f" (and {len(value) - 10} more)" if len(value) > 10 else ""
            out.append({"label": label, "value": text + more, "depth": depth})
        else:
            out.append({"label": label, "value": value, "depth": depth})
    return out


def _trend(run: ReportRun | None) -> dict[str, Any] | None:
    """The figures of the runs like ``run`` (same window kind), as a table
    with one row per figure and one column per run, newest last; None with
    fewer than two runs."""
    if run is None or run.status != ReportRun.Status.SUCCEEDED:
        return None
    data = comparisons.trend(run)
    if len(data["runs"]) < 2:
        return None
    rows = [
        {"figure": key, "values": [row[i] for row in data["rows"]]}
        for i, key in enumerate(data["figures"])
    ]
    return {"runs": data["runs"], "rows": rows}


@viewer_required
def report_detail(request: HttpRequest, name: str) -> HttpResponse:
    info = _info(name)
    run = None
    if request.GET.get("run"):
        run = get_object_or_404(ReportRun, pk=request.GET["run"], report=name)
    else:
        run = services.latest_run(name)
    tables, charts = [], []
    if run is not None and run.result_dir:
        for table in info.tables:
            limit = DETAIL_ROWS if table in info.detail_tables else ROWS
            try:
                columns, rows = report_results.read_table(run, table, limit)
            except (FileNotFoundError, OSError):
                continue
            tables.append(
                {
                    "name": table,
                    "columns": columns,
                    "rows": _times(columns, rows),
                    "total": (run.rows or {}).get(table, 0),
                }
            )
        charts = [c for c in (_chart_data(run, ch) for ch in info.charts) if c]
    task = report_schedules.ensure_schedules()[name]
    kwargs = json.loads(task.kwargs or "{}")
    history = ReportRun.objects.filter(report=name)[:20]
    return render(
        request,
        "reports/report.html",
        {
            "info": info,
            "run": run,
            "tables": tables,
            "charts": charts,
            "history": history,
            "schedule": task,
            "schedule_window_label": WINDOWS[report_schedules.schedule_window(task)],
            "schedule_form": ScheduleForm(
                report=name,
                initial={
                    "enabled": task.enabled,
                    "every_minutes": report_schedules.schedule_minutes(task) or 60,
                    "window": report_schedules.schedule_window(task),
                    "top_n": kwargs.get("top_n"),
                    "node": kwargs.get("node", ""),
                    "alert_figure": kwargs.get("alert", {}).get("figure", ""),
                    "alert_above": kwargs.get("alert", {}).get("above"),
                    **{
                        ScheduleForm.PREFIX + key: value
                        for key, value in kwargs.get("params", {}).items()
                    },
                },
            ),
            "run_form": RunForm(report=name),
            "trend": _trend(run),
            "summary_json": json.dumps(run.summary, indent=1) if run else "",
            "figures": figures(run.summary, labels=info.labels) if run else [],
        },
    )


@require_POST
@operator_required
def run_now(request: HttpRequest, name: str) -> HttpResponse:
    _info(name)
    form = RunForm(request.POST, report=name)
    if not form.is_valid():
        messages.error(request, f"Not started: {form.errors.as_text()}")
        return redirect("reports:detail", name=name)
    run = services.request_run(
        name,
        actor=request.user,
        params=form.report_params(),
        request=request,
        **services.run_options(form.cleaned_data),
    )
    if run.status == ReportRun.Status.FAILED:
        messages.error(request, f"Run #{run.pk} could not start: {run.error}")
    else:
        messages.success(
            request, f"Run #{run.pk} queued; this page shows it when it finishes."
        )
    return redirect("reports:detail", name=name)


@require_POST
@operator_required
def schedule(request: HttpRequest, name: str) -> HttpResponse:
    _info(name)
    form = ScheduleForm(request.POST, report=name)
    if not form.is_valid():
        messages.error(request, f"Schedule not saved: {form.errors.as_text()}")
    else:
        report_schedules.update_schedule(
            name,
            enabled=form.cleaned_data["enabled"],
            every_minutes=form.cleaned_data["every_minutes"],
            window=form.cleaned_data["window"] or "all",
            top_n=form.cleaned_data.get("top_n"),
            node=form.cleaned_data.get("node") or "",
            params=form.report_params(),
            alert={
                "figure": form.cleaned_data.get("alert_figure") or "",
                "above": form.cleaned_data.get("alert_above"),
            },
            actor=request.user,
            request=request,
        )
        messages.success(request, "Schedule saved.")
    return redirect("reports:detail", name=name)


@viewer_required
def download_csv(request: HttpRequest, name: str, run_id: int, table: str):
    return _download(name, run_id, table, "csv")


@viewer_required
def download_json(request: HttpRequest, name: str, run_id: int, table: str):
    return _download(name, run_id, table, "json")


@viewer_required
def download_parquet(request: HttpRequest, name: str, run_id: int, table: str):
    return _download(name, run_id, table, "parquet")


def _download(
    name: str, run_id: int, table: str, fmt: str
) -> HttpResponse | StreamingHttpResponse:
    """A whole result table: CSV or JSON lines (streamed), or Parquet."""
    _info(name)
    run = get_object_or_404(ReportRun, pk=run_id, report=name)
    if table not in (run.rows or {}) or not run.result_dir:
        raise Http404("no such table in this run")
    response: HttpResponse | StreamingHttpResponse
    if fmt == "parquet":
        response = HttpResponse(
            report_results.table_parquet(run, table),
            content_type="application/vnd.apache.parquet",
        )
    elif fmt == "json":
        response = StreamingHttpResponse(
            report_results.table_json(run, table), content_type="application/x-ndjson"
        )
    else:
        response = StreamingHttpResponse(
            report_results.table_csv(run, table), content_type="text/csv"
        )
    filename = f"{name}-{run.pk}-{table}.{fmt if fmt != 'json' else 'jsonl'}"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
