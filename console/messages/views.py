"""Message pages: search, one message (body for operators only), resend."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from broker_core import browse
from broker_core.errors import BrokerError, MessageNotFoundError
from console.core.forms import form_errors
from console.messages import services
from console.messages.forms import ResendForm, SearchForm
from console.topics.models import Topic
from console.topics.services import sync_topics
from console.ui.body import view_body
from console.ui.forms import to_ms
from console.ui.permissions import operator_required, viewer_required
from console.ui.roles import can_see_bodies


@viewer_required
def message_search(request: HttpRequest) -> HttpResponse:
    form = SearchForm(request.GET or None)
    result, error = None, None
    if form.is_bound and form.is_valid() and form.has_query():
        d = form.cleaned_data
        try:
            result = services.search_messages(
                topic=d["topic"],
                msg_id=d["msg_id"],
                key=d["key"],
                tag=d["tag"],
                sql=d["sql"],
                begin_ms=to_ms(d["begin"]),
                end_ms=to_ms(d["end"]),
                cursor=request.GET.get("cursor"),
            )
        except BrokerError as exc:
            error = str(exc)
    sync_topics()
    return render(
        request,
        "messages/search.html",
        {
            "form": form,
            "result": result,
            "error": error,
            "topics": Topic.objects.filter(system=False).values_list("name", flat=True),
        },
    )


@viewer_required
def message_detail(request: HttpRequest, msg_id: str) -> HttpResponse:
    try:
        msg = services.find_message(msg_id)
    except (MessageNotFoundError, BrokerError) as exc:
        raise Http404(str(exc)) from exc
    show_body = can_see_bodies(request.user)
    return render(
        request,
        "messages/message.html",
        {
            "m": browse.summary(msg),
            "consumers": services.message_consumers(msg),
            "properties": browse.user_properties(msg),
            "body": view_body(msg.body) if show_body else None,
            "resend_form": ResendForm() if show_body else None,
        },
    )


@require_POST
@operator_required
def message_resend(request: HttpRequest, msg_id: str) -> HttpResponse:
    form = ResendForm(request.POST)
    if not form.is_valid():
        messages.error(
            request,
            "Not resent: " + form_errors(form),
        )
        return redirect("messages:detail", msg_id=msg_id)
    try:
        r = services.resend_message(
            actor=request.user,
            request=request,
            msg_id=msg_id,
            group=form.cleaned_data["group"],
            reason=form.cleaned_data["reason"],
        )
    except MessageNotFoundError as exc:
        raise Http404(str(exc)) from exc
    except BrokerError as exc:
        messages.error(request, f"Not resent: {exc}")
    else:
        messages.success(
            request,
            f"Resent to %RETRY%{form.cleaned_data['group']} at "
            f"offset {r.queue_offset}.",
        )
    return redirect("messages:detail", msg_id=msg_id)
