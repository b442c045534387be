"""What the console knows about each report: title, tables, charts.

Kept apart from the Spark jobs so pages render without importing PySpark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

#: The delay report's lateness buckets (upper bound in ms, label); the last is
#: open. Here, not in the Spark job, so that pages can order them.
LAG_BUCKETS = (
    (-1, "early"),
    (10, "<=10 ms"),
    (100, "<=100 ms"),
    (1000, "<=1 s"),
    (10000, "<=10 s"),
)
#: Every histogram label in order, the open last bucket included.
LAG_LABELS = (*(name for _, name in LAG_BUCKETS), f">{LAG_BUCKETS[-1][0] // 1000} s")


@dataclass(frozen=True)
class Chart:
    """A Chart.js chart over one result table: x column, y columns, type."""

    table: str
    x: str
    y: tuple[str, ...]
    kind: str = "bar"
    title: str = ""
    series: str | None = None  # a column whose values become separate series
    #: How rows sharing an x value (and series) combine: "sum" for counts,
    #: "max" for percentiles (the worst row: a sum of percentiles means nothing).
    agg: str = "sum"
    #: The x values in their meaning's order (lateness buckets); other x
    #: values follow, sorted. None: sorted (times and numbers in order).
    x_order: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Param:
    """A whole-number setting an analyst may give a run or a schedule (a
    threshold); the report's own default applies when it is not given."""

    name: str
    label: str
    help: str
    default: int
    minimum: int = 0
    maximum: int = 10**12


@dataclass(frozen=True)
class ReportInfo:
    name: str
    title: str
    description: str
    tables: tuple[str, ...]  # shown in this order; the first is the main one
    charts: tuple[Chart, ...] = field(default=())
    # Per-message tables: downloadable, shown only in part.
    detail_tables: tuple[str, ...] = field(default=())
    params: tuple[Param, ...] = field(default=())
    #: Whether a run over a window is compared with the period before it
    #: (not consumer lag: its lag is measured against today's offsets).
    period_comparison: bool = True
    #: The summary figures the list of reports shows for the latest run
    #: (``outer.inner`` for a nested one), with their change.
    headline: tuple[str, ...] = field(default=())
    #: Words for summary keys whose name alone would mislead (the page and
    #: the list show ``key`` as words otherwise).
    labels: dict[str, str] = field(default_factory=dict)


REPORTS: dict[str, ReportInfo] = {
    r.name: r
    for r in (
        ReportInfo(
            "transaction_outcomes",
            "Transaction outcomes",
            "Per producer group, topic and hour: halves, commits, rollbacks, "
            "discards, still pending; half-to-outcome time; check counts; who "
            "decided; the longest-pending halves.",
            ("hourly", "check_counts", "longest_pending", "halves"),
            (
                Chart(
                    "hourly",
                    "hour",
                    ("commits", "rollbacks", "discarded", "pending"),
                    "bar",
                    "Outcomes per hour",
                ),
                Chart(
                    "hourly",
                    "hour",
                    ("outcome_ms_p50", "outcome_ms_p95", "outcome_ms_p99"),
                    "line",
                    "Half to outcome (ms), slowest group and topic of each hour",
                    agg="max",
                ),
                Chart("check_counts", "checks", ("halves",), "bar", "Check counts"),
            ),
            ("halves",),
            (
                Param(
                    "stuck_after_s",
                    "Stuck after (s)",
                    "A half pending longer than this counts as stuck "
                    "(summary: stuck; hourly: stuck).",
                    60,
                    minimum=1,
                ),
            ),
            headline=("states.PENDING", "stuck", "states.COMMITTED"),
        ),
        ReportInfo(
            "delay_punctuality",
            "Delay punctuality",
            "Per delay level and for timers: scheduled, delivered, recalled, "
            "pending; lateness of delivery (p50/p95/p99/max).",
            ("levels", "lag_histogram", "scheduled"),
            (
                Chart(
                    "levels",
                    "bucket",
                    ("lag_ms_p50", "lag_ms_p95", "lag_ms_p99"),
                    "bar",
                    "Delivery lag (ms)",
                    agg="max",
                ),
                Chart(
                    "lag_histogram",
                    "lag",
                    ("messages",),
                    "bar",
                    "Delivered by lateness",
                    series="bucket",
                    x_order=LAG_LABELS,
                ),
            ),
            ("scheduled",),
            (
                Param(
                    "late_after_ms",
                    "Late after (ms)",
                    "A delivery more than this after its due time counts as "
                    "late (summary and levels: late).",
                    1000,
                ),
            ),
            headline=("scheduled", "late", "lag_ms_p99"),
        ),
        ReportInfo(
            "topic_traffic",
            "Topic traffic",
            "Per topic and hour: messages, bytes, body sizes; top tags and keys.",
            ("hourly", "top_tags", "top_keys", "body_sizes"),
            (
                Chart(
                    "hourly",
                    "hour",
                    ("messages",),
                    "line",
                    "Messages per hour",
                    series="topic",
                ),
            ),
            headline=("messages", "bytes"),
        ),
        ReportInfo(
            "consumer_lag",
            "Consumer lag",
            "Per consumer group and queue (of each node on a cluster): committed "
            "offset, end of queue, lag in messages and age of the oldest "
            "unconsumed message.",
            ("groups", "queues"),
            (Chart("groups", "group", ("lag",), "bar", "Lag per group", "topic"),),
            (),
            (
                Param(
                    "behind_after",
                    "Behind after (messages)",
                    "A queue whose lag is more than this many messages counts as "
                    "behind (groups: queues_behind; summary: groups_behind).",
                    0,
                ),
            ),
            period_comparison=False,
            headline=("lag", "groups_behind", "max_lag_ms"),
            # A snapshot at the run, not the worst lag seen over a period.
            labels={"max_lag_ms": "oldest unconsumed message at the run (age, ms)"},
        ),
    )
}


#: Rolling windows a schedule can cover: key -> label. "all" is the whole log.
WINDOWS: dict[str, str] = {
    "all": "the whole log",
    "1h": "the last hour",
    "24h": "the last 24 hours",
    "7d": "the last 7 days",
    "prev_hour": "the previous full hour (UTC)",
    "yesterday": "yesterday (UTC)",
}


def window_bounds(key: str, now: datetime) -> tuple[datetime | None, datetime | None]:
    """(since, until) of window ``key`` at ``now`` (aware, UTC); (None, None)
    for the whole log. Raises KeyError for an unknown window."""
    if key not in WINDOWS:
        raise KeyError(key)
    now = now.astimezone(UTC)
    hour = now.replace(minute=0, second=0, microsecond=0)
    day = hour.replace(hour=0)
    return {
        "all": (None, None),
        "1h": (now - timedelta(hours=1), now),
        "24h": (now - timedelta(hours=24), now),
        "7d": (now - timedelta(days=7), now),
        "prev_hour": (hour - timedelta(hours=1), hour),
        "yesterday": (day - timedelta(days=1), day),
    }[key]


class ParamError(ValueError):
    """A run parameter the report does not take, or out of its range."""


def check_params(names: list[str] | tuple[str, ...], given: dict | None) -> dict:
    """``given`` checked against the parameters of reports ``names``: whole
    numbers within range, each known to at least one of them. Returns the
    cleaned dict; raises ``ParamError`` naming what is wrong."""
    known = {p.name: p for n in names for p in REPORTS[n].params}
    out: dict[str, int] = {}
    for key, value in (given or {}).items():
        if value is None or value == "":
            continue
        param = known.get(key)
        if param is None:
            takes = ", ".join(sorted(known)) or "none"
            raise ParamError(f"unknown parameter {key!r} (this report takes: {takes})")
        if isinstance(value, bool):
            raise ParamError(f"{key} must be a whole number")
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ParamError(f"{key} must be a whole number, not {value!r}") from None
        if isinstance(value, float) and value != number:
            raise ParamError(f"{key} must be a whole number, not {value!r}")
        if not param.minimum <= number <= param.maximum:
            raise ParamError(
                f"{key} must be between {param.minimum} and {param.maximum}"
            )
        out[key] = number
    return dict(sorted(out.items()))  # one spelling, so equal params match


def params_for(name: str, given: dict | None) -> dict:
    """The parameters of ``given`` that report ``name`` takes."""
    takes = {p.name for p in REPORTS[name].params}
    return {k: v for k, v in (given or {}).items() if k in takes}
