"""Each report's schedule: a django-celery-beat entry per report (created
disabled, hourly), its interval, window, node, parameters and alert, edited
and audited here."""

from __future__ import annotations

import json
from typing import Any

from django_celery_beat.models import IntervalSchedule, PeriodicTask

from console.audit.services import record_audit
from console.reports.catalog import REPORTS, WINDOWS, check_params
from console.reports.services import (
    DEFAULT_INTERVAL_MIN,
    TASK_NAME,
    check_name,
    check_node,
)


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
