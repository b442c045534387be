"""Topic pages: list, detail with queues, create/edit/delete (admin), browse a
queue, send a test message (operator)."""

from __future__ import annotations

from django.contrib import messages
from django.db.models import Sum
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from broker_core.cluster.node_ops import NodeUnavailableError
from broker_core.errors import BrokerError, TopicNotFoundError
from console.audit.services import audited
from console.consumers.models import ConsumerQueue
from console.core.forms import form_errors
from console.messages import services as message_services
from console.topics import services
from console.topics.filtersets import TopicFilterSet
from console.topics.forms import DeleteTopicForm, SendMessageForm, TopicForm
from console.topics.models import Topic
from console.ui.forms import LocalDateTimeField, to_ms
from console.ui.pagination import paginate, sort_queryset
from console.ui.permissions import admin_required, operator_required, viewer_required

SORTABLE = ("name", "message_type", "queues", "messages", "produce_rate")


def _topic_or_404(name: str) -> Topic:
    services.sync_topics()
    topic = Topic.objects.filter(name=name).first()
    if topic is None:
        raise Http404(f"no topic {name!r}")
    return topic


def _topic_to_act_on(request: HttpRequest, name: str, action: str) -> Topic:
    """``_topic_or_404`` for a submitted action (``topic.update``,
    ``topic.delete``): a topic the node does not have, or a node that does not
    answer, is that action's failure, audited (one FAILED record), then
    answered as before (404; a node away: its 503 page)."""
    try:
        return _topic_or_404(name)
    except (Http404, BrokerError) as exc:
        failure = (
            exc
            if isinstance(exc, BrokerError)
            else TopicNotFoundError(f"topic {name!r} does not exist")
        )

        def refuse() -> None:
            raise failure

        try:
            audited(
                refuse,
                actor=request.user,
                request=request,
                action=action,
                object_type="topic",
                object_id=name,
                reason=str(request.POST.get("reason", "")),
            )
        except BrokerError:
            pass
        raise


@viewer_required
def topic_list(request: HttpRequest) -> HttpResponse:
    services.sync_topics()
    data = request.GET.copy()
    data.setdefault("system", "false")
    fs = TopicFilterSet(data, queryset=Topic.objects.all())
    qs, sort = sort_queryset(request, fs.qs, SORTABLE, "name")
    return render(
        request,
        "topics/topic_list.html",
        {"filter": fs, "page": paginate(request, qs), "sort": sort},
    )


@viewer_required
def topic_detail(request: HttpRequest, name: str) -> HttpResponse:
    topic = _topic_or_404(name)
    history = services.topic_history(name)
    return render(
        request,
        "topics/topic.html",
        {
            "topic": topic,
            "queues": services.queue_ranges(name),
            # Each group once, with its lag over the topic's queues.
            "groups": ConsumerQueue.objects.filter(topic=name)
            .values("group")
            .annotate(lag=Sum("lag"))
            .order_by("group"),
            "send_form": SendMessageForm(),
            "history": {
                "t": [a.isoformat() for a, _ in history],
                "n": [n for _, n in history],
            },
        },
    )


@admin_required
def topic_create(request: HttpRequest) -> HttpResponse:
    form = TopicForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        try:
            services.create_topic(
                actor=request.user,
                request=request,
                name=d["name"],
                read_queue_nums=d["read_queue_nums"],
                write_queue_nums=d["write_queue_nums"],
                perm=d["perm"],
                message_type=d["message_type"],
                reason=d["reason"],
            )
        except BrokerError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Topic {d['name']} created.")
            return redirect("topics:detail", name=d["name"])
    return render(request, "topics/topic_form.html", {"form": form, "editing": False})


@admin_required
def topic_edit(request: HttpRequest, name: str) -> HttpResponse:
    if request.method == "POST":
        topic = _topic_to_act_on(request, name, "topic.update")
    else:
        topic = _topic_or_404(name)
    initial = {
        "name": name,
        "read_queue_nums": topic.read_queue_nums,
        "write_queue_nums": topic.write_queue_nums,
        "perm": topic.perm,
        "message_type": topic.message_type,
    }
    form = TopicForm(request.POST or None, initial=initial, editing=True)
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        changes = {
            k: d[k]
            for k in ("read_queue_nums", "write_queue_nums", "perm", "message_type")
            if d[k] != initial[k]
        }
        try:
            if changes:
                services.update_topic(
                    actor=request.user,
                    request=request,
                    name=name,
                    reason=d["reason"],
                    **changes,
                )
        except BrokerError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(
                request, f"Topic {name} updated." if changes else "Nothing changed."
            )
            return redirect("topics:detail", name=name)
    return render(
        request,
        "topics/topic_form.html",
        {"form": form, "editing": True, "topic": topic},
    )


@admin_required
def topic_delete(request: HttpRequest, name: str) -> HttpResponse:
    if request.method == "POST":
        topic = _topic_to_act_on(request, name, "topic.delete")
    else:
        topic = _topic_or_404(name)
    form = DeleteTopicForm(request.POST or None, topic=name)
    if request.method == "POST" and form.is_valid():
        try:
            services.delete_topic(
                actor=request.user,
                request=request,
                name=name,
                reason=form.cleaned_data["reason"],
            )
        except BrokerError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Topic {name} deleted.")
            return redirect("topics:list")
    return render(request, "topics/topic_delete.html", {"form": form, "topic": topic})


@viewer_required
def queue_browse(request: HttpRequest, name: str, queue_id: int) -> HttpResponse:
    topic = _topic_or_404(name)
    offset = request.GET.get("offset", "").strip()
    at = request.GET.get("at", "").strip()
    error = None
    at_ms = None
    if at:
        try:
            at_ms = to_ms(LocalDateTimeField().clean(at))
        except Exception:
            error = f"Not a date and time: {at!r}"
    try:
        page = message_services.browse_queue(
            name,
            queue_id,
            offset=int(offset) if offset.lstrip("-").isdigit() else None,
            at_ms=at_ms,
            count=50,
        )
    except TopicNotFoundError as exc:
        raise Http404(str(exc)) from exc
    except BrokerError as exc:
        raise Http404(str(exc)) from exc
    return render(
        request,
        "topics/queue.html",
        {
            "topic": topic,
            "queue_id": queue_id,
            "page": page,
            "offset": offset,
            "at": at,
            "error": error,
            "queue_ids": range(topic.queues),
        },
    )


@require_POST
@operator_required
def message_send(request: HttpRequest, name: str) -> HttpResponse:
    # The topic is looked up within the audited send (a topic the node does
    # not have: a FAILED record, then 404; a node away: its 503 page).
    form = SendMessageForm(request.POST)
    if not form.is_valid():
        messages.error(
            request,
            "Not sent: " + form_errors(form),
        )
        return redirect("topics:detail", name=name)
    d = form.cleaned_data
    schedule = {}
    if d["delay_level"]:
        schedule["DELAY"] = str(d["delay_level"])
    if d["deliver_at"]:
        # Too far ahead: refused by the broker with the cap in the reason.
        schedule["TIMER_DELIVER_MS"] = str(to_ms(d["deliver_at"]))
    try:
        result = message_services.send_test_message(
            actor=request.user,
            request=request,
            topic=name,
            body=d["body"].encode(),
            tags=d["tags"],
            keys=d["keys"],
            properties=d["properties"] | schedule,
        )
    except TopicNotFoundError as exc:
        raise Http404(str(exc)) from exc
    except NodeUnavailableError:
        raise  # the node's 503 page (``picker``)
    except BrokerError as exc:
        messages.error(request, f"Not sent: {exc}")
        return redirect("topics:detail", name=name)
    messages.success(
        request,
        f"Sent {result.msg_id} to queue {result.queue_id} at "
        f"offset {result.queue_offset}.",
    )
    if d["delay_level"]:
        return redirect(
            reverse("delays:scheduled") + f"?kind=level&level={d['delay_level']}"
        )
    if d["deliver_at"] and result.topic != name:  # parked, not already due
        return redirect(reverse("delays:scheduled") + "?kind=timer")
    return redirect(reverse("messages:detail", args=[result.msg_id]))
