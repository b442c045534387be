"""Template helpers: role checks, sortable column headers, timestamps."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html

from console.ui.roles import has_role as _has_role

register = template.Library()


@register.filter
def has_role(user: Any, role: str) -> bool:
    """``{% if user|has_role:"operator" %}``."""
    return _has_role(user, role)


@register.simple_tag(takes_context=True)
def sort_header(context: dict[str, Any], label: str, key: str) -> str:
    """A column header linking to this page sorted by ``key`` (toggling order)."""
    request = context["request"]
    current = request.GET.get("sort") or context.get("sort", "")
    params = request.GET.copy()
    params.pop("page", None)
    if current == key:
        params["sort"] = f"-{key}"
        arrow = " ▲"
    elif current == f"-{key}":
        params["sort"] = key
        arrow = " ▼"
    else:
        params["sort"] = key
        arrow = ""
    return format_html(
        '<a class="sort" href="?{}">{}{}</a>', params.urlencode(), label, arrow
    )


@register.filter
def ms_datetime(value: Any) -> Any:
    """Render a millisecond epoch timestamp as an aware UTC datetime."""
    try:
        ms = int(value)
    except (TypeError, ValueError):
        return value
    if ms <= 0:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


@register.filter
def duration_ms(value: Any) -> str:
    """Render milliseconds as a short duration: 1.5s, 2m, 1h 30m."""
    try:
        ms = int(value)
    except (TypeError, ValueError):
        return ""
    if ms < 1000:
        return f"{ms}ms"
    s = ms / 1000
    if s < 60:
        return f"{s:g}s"
    m, s = divmod(int(s), 60)
    if m < 60:
        return f"{m}m {s}s" if s else f"{m}m"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h {m}m" if m else f"{h}h"
    return f"{h // 24}d {h % 24}h"


@register.filter
def json_attr(value: Any) -> str:
    """JSON text for an HTML attribute (autoescaping quotes it safely)."""
    import json

    return json.dumps(value)


@register.filter
def duration_ms_s(value: Any) -> str:
    """Render seconds as a short duration (see ``duration_ms``)."""
    try:
        return duration_ms(int(value) * 1000)
    except (TypeError, ValueError):
        return ""


def _ago(seconds: float) -> str:
    future = seconds < 0
    s = abs(seconds)
    if s < 60:
        text = f"{s:.0f} s"
    elif s < 3600:
        text = f"{s / 60:.0f} min"
    elif s < 86400 * 2:
        text = f"{s / 3600:.1f} h"
    else:
        text = f"{s / 86400:.0f} d"
    return f"in {text}" if future else f"{text} ago"


@register.filter
def cell(value: Any) -> Any:
    """A result-table cell: times with their zone and age (``when``), numbers
    grouped, the rest as they are."""
    if isinstance(value, dt.datetime):
        return when(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return value


@register.filter
def when(value: Any, precise: str = "") -> Any:
    """A time with its zone and its age: ``2026-11-23 21:04:05 UTC · 5 min ago``.

    ``value`` is an aware datetime or a millisecond epoch; the zone is the
    console's (``TIME_ZONE``, UTC by default). ``|when:"ms"`` adds milliseconds.
    Empty values render as an em dash.
    """
    if value in (None, "") or (isinstance(value, int | float) and value <= 0):
        return "—"
    moment = value if isinstance(value, dt.datetime) else ms_datetime(value)
    if not isinstance(moment, dt.datetime):
        return value
    local = timezone.localtime(moment)
    fmt = "%Y-%m-%d %H:%M:%S.%f" if precise == "ms" else "%Y-%m-%d %H:%M:%S"
    text = local.strftime(fmt)
    if precise == "ms":
        text = text[:-3]
    age = _ago((timezone.now() - moment).total_seconds())
    return format_html(
        '<time datetime="{}" title="{}">{} {}</time> <span class="ago">· {}</span>',
        moment.isoformat(), age, text, local.tzname() or "", age,
    )  # fmt: skip


def _moment(value: Any) -> dt.datetime | None:
    if value in (None, "") or (isinstance(value, int | float) and value <= 0):
        return None
    moment = value if isinstance(value, dt.datetime) else ms_datetime(value)
    return moment if isinstance(moment, dt.datetime) else None


@register.filter
def age(value: Any) -> Any:
    """A list cell's time as its age (``5 min ago``), the full time with its
    zone in the title; an em dash when empty."""
    moment = _moment(value)
    if moment is None:
        return "—"
    local = timezone.localtime(moment)
    return format_html(
        '<time datetime="{}" title="{} {}">{}</time>',
        moment.isoformat(), local.strftime("%Y-%m-%d %H:%M:%S"),
        local.tzname() or "", _ago((timezone.now() - moment).total_seconds()),
    )  # fmt: skip


@register.filter
def clock(value: Any) -> Any:
    """A list cell's time of day with its zone (``21:04:05 UTC``), the date
    and age in the title; an em dash when empty."""
    moment = _moment(value)
    if moment is None:
        return "—"
    local = timezone.localtime(moment)
    return format_html(
        '<time datetime="{}" title="{} · {}">{} {}</time>',
        moment.isoformat(), local.strftime("%Y-%m-%d"),
        _ago((timezone.now() - moment).total_seconds()),
        local.strftime("%H:%M:%S"), local.tzname() or "",
    )  # fmt: skip


@register.simple_tag
def next_check(due_ms: Any, full: bool = False) -> Any:
    """When a pending half is checked next: its due time, or, once that has
    passed, the next run of the periodic check (``TRANSACTION_CHECK_INTERVAL``
    apart). ``full``: the sentence of a half's page, else a list's cell."""
    from django.conf import settings

    every = f"{settings.TRANSACTION_CHECK_INTERVAL:g} s"
    if not isinstance(due_ms, int | float) or due_ms <= 0:
        return "—"
    clock = timezone.localtime(ms_datetime(due_ms)).strftime("%H:%M:%S")
    if due_ms > timezone.now().timestamp() * 1000:
        if full:
            return format_html(
                "{}, or the first check run after it (the check runs every {})",
                when(due_ms), every,
            )  # fmt: skip
        return format_html(
            '<span title="due then; checked by the first check run after it '
            '(every {})">{}</span>', every, clock,
        )  # fmt: skip
    if full:
        return format_html(
            "at the next check run (due since {}; the check runs every {})",
            when(due_ms), every,
        )  # fmt: skip
    return format_html(
        '<span title="due since {}; checked by the next check run (every {})">'
        "next run</span>", clock, every,
    )  # fmt: skip
