"""Consumer group pages: the list with lag, a group's queues, offset reset
with a preview (operator) and the group's settings (admin)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from broker_core.errors import BrokerError
from console.consumers import services
from console.consumers.filtersets import ConsumerQueueFilterSet
from console.consumers.forms import GroupSettingsForm, ResetForm
from console.consumers.models import ConsumerQueue
from console.core.forms import form_errors
from console.ui.forms import to_ms
from console.ui.pagination import paginate
from console.ui.permissions import (
    admin_required,
    operator_required,
    viewer_required,
)

SORTABLE = ("group", "topics", "queues", "total_lag", "max_lag")


@viewer_required
def group_list(request: HttpRequest) -> HttpResponse:
    services.sync_offsets()
    fs = ConsumerQueueFilterSet(request.GET, queryset=ConsumerQueue.objects.all())
    sort = request.GET.get("sort") or "group"
    if sort.lstrip("-") not in SORTABLE:
        sort = "group"
    groups = services.group_summaries(fs.qs).order_by(sort, "group")
    page = paginate(request, groups)
    settings = services.groups_settings()
    page.object_list = [
        g | {"settings": settings.get(g["group"])} for g in page.object_list
    ]
    return render(
        request,
        "consumers/group_list.html",
        {"filter": fs, "page": page, "sort": sort},
    )


def _topics_of(group: str) -> list[str]:
    return sorted({q["topic"] for q in services.group_queues(group)})


def _settings_form(settings: dict, data: dict | None = None) -> GroupSettingsForm:
    return GroupSettingsForm(
        data,
        default=settings["default_max_delivery_attempts"],
        initial={
            "fifo": settings["fifo"],
            "max_delivery_attempts": settings["max_delivery_attempts"],
        },
        auto_id="id_settings_%s",  # the reset form on the same page has a reason
    )


@viewer_required
def group_detail(request: HttpRequest, group: str) -> HttpResponse:
    queues = services.group_queues(group)
    settings = services.group_settings(group)
    # A group set up before its consumers came (CLI, API) has a page too.
    if not queues and not settings["configured"]:
        raise Http404(f"no consumer group {group!r}")
    topics = sorted({q["topic"] for q in queues})
    return render(
        request,
        "consumers/group.html",
        {
            "group": group,
            "queues": queues,
            "total_lag": sum(q["lag"] for q in queues),
            "dead_letters": services.group_dead_letters(group),
            "dlq_topic": f"%DLQ%{group}",
            "clients": services.group_clients(group),
            "form": ResetForm(
                topics=topics, initial={"topic": next(iter(topics), None)}
            ),
            "settings": settings,
            "settings_form": _settings_form(settings),
        },
    )


def _reset_args(form: ResetForm) -> dict:
    d = form.cleaned_data
    args = {"queue_id": d["queue_id"]}
    if d["mode"] == "time":
        args["to_ms"] = to_ms(d["at"])
    else:
        args["to_offset"] = d["offset"]
    return args


@require_POST
@operator_required
def reset_preview(request: HttpRequest, group: str) -> HttpResponse:
    """The htmx partial: each queue's current and new offset, nothing changed."""
    form = ResetForm(request.POST, topics=_topics_of(group))
    changes, error = None, None
    if form.is_valid():
        try:
            changes = services.preview_reset(
                group, form.cleaned_data["topic"], **_reset_args(form)
            )
        except BrokerError as exc:
            error = str(exc)
    else:
        error = "; ".join(" ".join(v) for v in form.errors.values())
    return render(
        request, "consumers/_reset_preview.html", {"changes": changes, "error": error}
    )


@require_POST
@operator_required
def reset_offsets(request: HttpRequest, group: str) -> HttpResponse:
    form = ResetForm(request.POST, topics=_topics_of(group), need_reason=True)
    if not form.is_valid():
        messages.error(
            request,
            "Not reset: " + form_errors(form),
        )
        return redirect("consumers:detail", group=group)
    try:
        changes = services.reset_offsets(
            actor=request.user,
            request=request,
            group=group,
            topic=form.cleaned_data["topic"],
            reason=form.cleaned_data["reason"],
            **_reset_args(form),
        )
    except BrokerError as exc:
        messages.error(request, f"Not reset: {exc}")
    else:
        messages.success(
            request,
            f"Reset {len(changes)} queue(s) of {group} on "
            f"{form.cleaned_data['topic']}.",
        )
    return redirect("consumers:detail", group=group)


@require_POST
@admin_required
def update_settings(request: HttpRequest, group: str) -> HttpResponse:
    current = services.group_settings(group)
    form = _settings_form(current, request.POST)
    if not form.is_valid():
        messages.error(
            request,
            "Settings not saved: " + form_errors(form),
        )
        return redirect("consumers:detail", group=group)
    d = form.cleaned_data
    try:
        saved = services.update_group_settings(
            actor=request.user,
            request=request,
            group=group,
            fifo=d["fifo"],
            max_delivery_attempts=d["max_delivery_attempts"],
            reason=d["reason"],
        )
    except BrokerError as exc:
        messages.error(request, f"Settings not saved: {exc}")
    else:
        attempts = saved["max_delivery_attempts"] or (
            f"the default ({saved['default_max_delivery_attempts']})"
        )
        messages.success(
            request,
            f"Settings of {group} saved: FIFO {'on' if saved['fifo'] else 'off'}, "
            f"{attempts} delivery attempts before the dead-letter queue.",
        )
    return redirect("consumers:detail", group=group)


#: Dead letters a page lists (the newest) and a batch resends at most.
DLQ_PAGE = 200


#: A dead letter's ``DLQ_REASON`` as the page says it (older copies: none).
DLQ_REASONS = {
    "MAX_ATTEMPTS": "delivery attempts ran out",
    "FORWARDED_BY_CONSUMER": "its consumer sent it here",
}


def _dead_letter_page(group: str) -> list[dict]:
    """The newest dead letters of ``group``, newest first, with where each came
    from and how often it was tried."""
    from console.messages.services import browse_queue

    try:
        page = browse_queue(f"%DLQ%{group}", 0, count=DLQ_PAGE)
    except BrokerError:
        return []
    rows = []
    for m in reversed(page.messages):
        props = m.properties
        rows.append(
            {
                "msg_id": props.get("UNIQ_KEY") or m.offset_msg_id,
                "offset_msg_id": m.offset_msg_id,
                "queue_offset": m.queue_offset,
                "topic": props.get("RETRY_TOPIC", ""),
                "origin": f"{props.get('DLQ_ORIGIN_QUEUE', '?')}:"
                f"{props.get('DLQ_ORIGIN_OFFSET', '?')}",
                "attempts": m.reconsume_times,
                "reason": DLQ_REASONS.get(props.get("DLQ_REASON", ""), ""),
                "keys": props.get("KEYS", ""),
                "tags": props.get("TAGS", ""),
                "stored_ms": m.store_timestamp,
                "body_size": len(m.body),
            }
        )
    return rows


def _resent(group: str, msg_ids: list[str]) -> dict[str, Any]:
    """The last successful resend to ``group`` of each of ``msg_ids`` (their
    ``UNIQ_KEY``), from the audit log: msg id -> the audit record."""
    from console.audit.models import AuditRecord
    from console.audit.services import node_object_id
    from console.cluster.scope import chosen_node

    # Audited as ``<node>/<msg id>`` (``node_object_id``); records of the
    # console's own store written before that carry the bare id.
    wanted = {node_object_id(m): m for m in msg_ids}
    if not chosen_node():
        wanted.update({m: m for m in msg_ids})
    out: dict[str, Any] = {}
    records = AuditRecord.objects.filter(
        action="message.resend",
        status=AuditRecord.Status.SUCCESS,
        object_id__in=list(wanted),
        after__group=group,
    ).order_by("created_at")
    for rec in records:
        out[wanted[rec.object_id]] = rec
    return out


@viewer_required
def dead_letters(request: HttpRequest, group: str) -> HttpResponse:
    """The group's dead-letter queue: what, from where, after how many
    attempts, whether and when it was resent; CSV export; resend a selection
    to the group (operator)."""
    rows = _dead_letter_page(group)
    resent = _resent(group, [r["msg_id"] for r in rows])
    for r in rows:
        rec = resent.get(r["msg_id"])
        r["resent_at"] = rec.created_at if rec else None
        r["resent_by"] = rec.actor_username if rec else ""
    if request.GET.get("format") == "csv":
        import csv

        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = (
            f'attachment; filename="dead-letters-{group}.csv"'
        )
        out = csv.writer(response)
        fields = ["msg_id", "offset_msg_id", "topic", "origin", "attempts", "reason",
                  "keys", "tags", "stored_ms", "body_size", "resent_at",
                  "resent_by"]  # fmt: skip
        out.writerow(fields)
        for r in rows:
            out.writerow([r[f] for f in fields])
        return response
    return render(
        request,
        "consumers/dead_letters.html",
        {
            "group": group,
            "rows": rows,
            "total": services.group_dead_letters(group),
            "dlq_topic": f"%DLQ%{group}",
            "page_max": DLQ_PAGE,
        },
    )


@require_POST
@operator_required
def resend_dead_letters(request: HttpRequest, group: str) -> HttpResponse:
    """Resend the selected dead letters to the group (each audited as
    ``message.resend``): its consumers receive them again, once."""
    from console.messages.services import resend_message

    back = redirect("consumers:dead-letters", group=group)
    reason = request.POST.get("reason", "").strip()
    ids = request.POST.getlist("ids")[:DLQ_PAGE]
    if len(reason) < 3:
        messages.error(request, "Nothing resent: a reason is required.")
        return back
    if not ids:
        messages.error(request, "Nothing resent: no dead letter selected.")
        return back
    # A dead letter already resent to the group is skipped unless asked
    # again: a stale tab resent every one a second time (helper-14).
    again = bool(request.POST.get("again"))
    uniq = {r["offset_msg_id"]: r["msg_id"] for r in _dead_letter_page(group)}
    resent = _resent(group, [uniq.get(i, i) for i in ids])
    done, failed, skipped = 0, [], 0
    for msg_id in ids:
        if not again and uniq.get(msg_id, msg_id) in resent:
            skipped += 1
            continue
        try:
            resend_message(
                actor=request.user, msg_id=msg_id, group=group, reason=reason,
                request=request,
            )  # fmt: skip
            done += 1
        except BrokerError as exc:
            failed.append(f"{msg_id}: {exc}")
    if done:
        messages.success(request, f"Resent {done} dead letter(s) to {group}.")
    if skipped:
        messages.warning(
            request,
            f"{skipped} skipped: already resent to {group} (tick 'resend again' "
            "to send them once more).",
        )
    if failed:
        messages.error(request, "Not resent: " + "; ".join(failed[:5]))
    return back
