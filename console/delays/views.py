"""Delay queue pages: the 18 levels and the timers, scheduled messages, cancel."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from broker_core.errors import BrokerError
from console.delays import services
from console.delays.forms import CancelForm
from console.ui.permissions import operator_required, viewer_required

PAGE = 50


@viewer_required
def level_list(request: HttpRequest) -> HttpResponse:
    stats = services.delay_stats()
    context = {
        "stats": stats,
        "levels": services.level_rows(stats),
        "backlog": sum(lv.backlog for lv in stats.levels),
    }
    template = (
        "delays/_levels.html"
        if request.headers.get("HX-Request")
        else "delays/levels.html"
    )
    return render(request, template, context)


@viewer_required
def scheduled_list(request: HttpRequest) -> HttpResponse:
    kind = request.GET.get("kind") or None
    if kind not in (None, "level", "timer"):
        kind = None
    try:
        level = int(request.GET["level"]) if request.GET.get("level") else None
        start = max(0, int(request.GET.get("start", 0)))
    except ValueError:
        level, start = None, 0
    rows = services.list_scheduled(kind, level, PAGE + 1, start)
    return render(
        request,
        "delays/scheduled.html",
        {
            "rows": rows[:PAGE],
            "has_more": len(rows) > PAGE,
            "start": start,
            "next_start": start + PAGE,
            "prev_start": max(0, start - PAGE),
            "kind": kind or "",
            "level": level,
            "levels": range(1, len(services.delay_stats().levels) + 1),
            "cancel_form": CancelForm(),
        },
    )


@require_POST
@operator_required
def cancel(request: HttpRequest, msg_id: str) -> HttpResponse:
    form = CancelForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not cancelled: a reason is required.")
    else:
        try:
            services.cancel_scheduled(
                actor=request.user,
                request=request,
                msg_id=msg_id,
                reason=form.cleaned_data["reason"],
            )
        except BrokerError as exc:
            messages.error(request, f"Not cancelled: {exc}")
        else:
            messages.success(request, f"Cancelled {msg_id}: it will not be delivered.")
    nxt = request.POST.get("next", "")
    if nxt and url_has_allowed_host_and_scheme(nxt, allowed_hosts={request.get_host()}):
        return redirect(nxt)
    return redirect("delays:scheduled")
