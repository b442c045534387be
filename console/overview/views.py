"""The overview: what an operator checks first — traffic, lag, delays — with
the last 24 hours charted. It refreshes itself every few seconds."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from console.ui.permissions import viewer_required


def _traffic_series(hours: int = 24) -> dict[str, list[Any]]:
    """Messages stored per clock minute across all non-internal topics, from
    the depth samples ``topics.sync`` takes every few seconds
    (``console.ui.buckets``)."""
    from console.topics.models import Topic, TopicSample
    from console.ui.buckets import per_minute

    names = list(Topic.objects.filter(system=False).values_list("name", flat=True))
    since = timezone.now() - timedelta(hours=hours)
    points = list(
        TopicSample.objects.filter(topic__in=names, at__gte=since)
        .values("at")
        .annotate(total=Sum("messages"))
        .order_by("at")
        .values_list("at", "total")
    )
    counts = per_minute([(t, {"n": int(n or 0)}) for t, n in points], ["n"])
    return {"t": counts["t"], "rate": counts["n"]}


def chart_window(labels: list[str], hours: int = 24) -> str:
    """What a chart really covers: "last 24 h", or the span of its samples."""
    if not labels:
        return "no data yet"
    first = datetime.fromisoformat(labels[0])
    span = (datetime.fromisoformat(labels[-1]) - first).total_seconds()
    if span >= (hours - 1) * 3600:
        return f"last {hours} h"
    if span < 3600:
        return f"last {max(1, round(span / 60))} min (data since {first:%H:%M} UTC)"
    return f"last {span / 3600:.1f} h (data since {first:%H:%M} UTC)"


def overview_context() -> dict[str, Any]:
    from console.consumers.services import group_summaries, sync_offsets
    from console.delays.services import delay_stats
    from console.topics.models import Topic
    from console.topics.services import sync_topics

    sync_topics()
    sync_offsets()
    topics = Topic.objects.filter(system=False)
    totals = topics.aggregate(messages=Sum("messages"), rate=Sum("produce_rate"))
    groups = list(group_summaries().order_by("-total_lag")[:8])
    try:
        stats = delay_stats()
    except Exception as exc:  # the overview must render even if delays are down
        stats, delay_error = None, str(exc)
    else:
        delay_error = None
    try:
        from console.transactions import services as tx

        tx_metrics = tx.sample_metrics()
        tx_stuck = tx.stuck_counts()
        tx_series = tx.metric_series()
        tx_error = None
    except Exception as exc:  # the overview must render even if transactions are down
        tx_metrics = tx_stuck = None
        tx_series = {"t": []}
        tx_error = str(exc)
    series = _traffic_series()
    return {
        "tx": tx_metrics,
        "tx_stuck": tx_stuck,
        "tx_series": tx_series,
        "tx_error": tx_error,
        "topic_count": topics.count(),
        "message_total": totals["messages"] or 0,
        "rate": totals["rate"] or 0.0,
        "busiest": topics.order_by("-produce_rate", "-messages")[:8],
        "groups": groups,
        "total_lag": sum(g["total_lag"] or 0 for g in group_summaries()),
        "delay": stats,
        "delay_backlog": sum(lv.backlog for lv in stats.levels) if stats else 0,
        "delay_overdue": [lv for lv in stats.levels if lv.oldest_overdue_ms > 5000]
        if stats
        else [],
        "delay_error": delay_error,
        "series": series,
        "traffic_window": chart_window(series["t"]),
        "tx_window": chart_window(tx_series["t"]),
        "now": timezone.now(),
    }


@viewer_required
def overview(request: HttpRequest) -> HttpResponse:
    template = (
        "overview/_overview.html"
        if request.headers.get("HX-Request")
        else "overview/overview.html"
    )
    return render(request, template, overview_context())
