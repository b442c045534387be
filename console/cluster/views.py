"""The cluster page: nodes, replication lag, every master's pending halves
with commit (admins) and roll back (operators), each sent to its node, and
every master's consumer lag and delay levels, with the node shown; a message
search on a chosen node, and an offset reset and a delayed message's cancel
on a chosen master (operators); and the page of one node."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from broker_core.cluster.node_ops import NodeUnavailableError
from broker_core.errors import BrokerError
from console.cluster import actions, node_detail, nodes, search
from console.cluster.forms import CancelForm, ResetForm, SearchForm
from console.cluster.state import cluster_state
from console.core.forms import form_errors
from console.ui.forms import to_ms
from console.ui.permissions import admin_required, viewer_required
from console.ui.roles import ADMIN, OPERATOR, has_role


@viewer_required
def cluster(request: HttpRequest) -> HttpResponse:
    context = {"enabled": nodes.enabled(), "cluster": "", "nodes": [],
               "halves": [], "discarded": [], "lag": [], "delays": [],
               "errors": [], "tx": None}  # fmt: skip
    if context["enabled"]:
        from django.conf import settings

        context["cluster"] = settings.BROKER_CLUSTER
        try:
            state = cluster_state()
        except Exception as exc:  # noqa: BLE001 - the registry is away
            context["errors"] = [f"Not reachable: the route registry: {exc}"]
        else:
            context.update(
                nodes=state.nodes,
                halves=state.halves,
                discarded=state.discarded,
                lag=state.lag,
                delays=state.delays,
                errors=state.errors,
                tx=state.transactions,
                masters=sum(1 for n in state.nodes if n.is_master),
            )
    context["can_commit"] = has_role(request.user, ADMIN)
    context["can_rollback"] = has_role(request.user, OPERATOR)
    context["search_form"] = _search(request, context)
    context["reset_form"] = ResetForm()
    context["cancel_form"] = CancelForm()
    return render(request, "cluster/cluster.html", context)


@viewer_required
def node_page(request: HttpRequest, node: str) -> HttpResponse:
    """One node through its admin API: status, metrics, topics, clients,
    consumer lag, delay levels and pending halves; 404 for a key the
    registry does not know."""
    context: dict = {"key": node, "cluster": getattr(settings, "BROKER_CLUSTER", "")}
    if not nodes.enabled():
        context["missing"] = "This console manages a single node: no cluster is set."
        return render(request, "cluster/node.html", context, status=404)
    if node_detail.parse_key(node) is None:
        context["missing"] = (
            f"{node!r} is not a node key: a node is named by its broker name "
            "and id, as broker-a:0."
        )
        return render(request, "cluster/node.html", context, status=404)
    try:
        detail = node_detail.node_detail(node)
    except NodeUnavailableError as exc:  # the registry did not answer
        context["errors"] = [str(exc)]
        return render(request, "cluster/node.html", context)
    if detail is None:
        context["missing"] = (
            f"{nodes.not_live(node)}: it is not registered, or it has stopped "
            "heartbeating."
        )
        return render(request, "cluster/node.html", context, status=404)
    context.update(detail=detail, n=detail.node, errors=detail.errors)
    return render(request, "cluster/node.html", context)


def _search(request: HttpRequest, context: dict) -> SearchForm:
    """Run the page's message search if asked (``search_node`` in the query):
    ``context["search"]`` is the node's ``NodeSearch``, or
    ``context["search_error"]`` says why there is none."""
    if "search_node" not in request.GET or not context["enabled"]:
        return SearchForm()
    form = SearchForm(request.GET)
    if not form.is_valid():
        context["search_error"] = "; ".join(
            " ".join(errors) for errors in form.errors.values()
        )
        return form
    d = form.cleaned_data
    find = dict(topic=d["topic"], key=d["key"], msg_id=d["msg_id"])
    try:
        if d["search_node"] == search.EVERY_NODE:
            context["search"] = search.search_every_node(**find)
        else:
            context["search"] = search.search_node(d["search_node"], **find)
    except BrokerError as exc:
        context["search_error"] = f"{d['search_node']}: {exc}"
    return form


def _refused(request: HttpRequest, what: str) -> HttpResponse | None:
    """Refuse a node action to anyone below an operator (as a roll back)."""
    if has_role(request.user, OPERATOR):
        return None
    messages.error(request, f"{what} needs the {OPERATOR} role")
    return redirect("cluster:overview")


@require_POST
@viewer_required
def reset(request: HttpRequest) -> HttpResponse:
    """Reset a consumer group's offsets on one master (operators, audited)."""
    if refused := _refused(request, "An offset reset"):
        return refused
    form = ResetForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Not reset: {form_errors(form)}")
        return redirect("cluster:overview")
    d = form.cleaned_data
    try:
        changes = actions.reset_offset(
            d["node"], d["group"], d["topic"], actor=request.user,
            reason=d["reason"], to_offset=d["offset"], to_ms=to_ms(d["at"]),
            queue_id=d["queue_id"], request=request,
        )  # fmt: skip
    except BrokerError as exc:
        messages.error(
            request, f"Reset of {d['group']} on {d['node']} {actions.failed(exc)}"
        )
    else:
        moved = ", ".join(f"queue {c['queue_id']} -> {c['target']}" for c in changes)
        messages.success(
            request, f"Reset {d['group']} on {d['topic']} on {d['node']}: {moved}."
        )
    return redirect("cluster:overview")


@require_POST
@viewer_required
def cancel(request: HttpRequest) -> HttpResponse:
    """Cancel a delayed message on one master (operators, audited)."""
    if refused := _refused(request, "Cancelling a delayed message"):
        return refused
    form = CancelForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Not cancelled: {form_errors(form)}")
        return redirect("cluster:overview")
    d = form.cleaned_data
    try:
        actions.cancel_delayed(d["node"], d["msg_id"], actor=request.user,
                                reason=d["reason"], request=request)  # fmt: skip
    except BrokerError as exc:
        messages.error(
            request, f"Cancel of {d['msg_id']} on {d['node']} {actions.failed(exc)}"
        )
    else:
        messages.success(
            request,
            f"Cancelled {d['msg_id']} on {d['node']}: it will not be delivered.",
        )
    return redirect("cluster:overview")


@require_POST
@admin_required
def topic(request: HttpRequest) -> HttpResponse:
    """Create a topic on the chosen masters with a queue count."""
    name = request.POST.get("topic", "").strip()
    chosen = request.POST.getlist("nodes")
    try:
        queues = int(request.POST.get("queues", "4"))
    except ValueError:
        queues = 0
    if not name or not chosen or not 1 <= queues <= 1024:
        messages.error(request, "Give a topic, 1 to 1024 queues and at least one node.")
        return redirect("cluster:overview")
    done = actions.put_topic(chosen, name, queues, request.user, request)
    text = "; ".join(f"{n}: {r}" for n, r in done.items())
    ok = all(r == "created" for r in done.values())
    (messages.success if ok else messages.error)(request, f"Topic {name}: {text}")
    return redirect("cluster:overview")


@require_POST
@viewer_required
def decide(request: HttpRequest, node: str, transaction_id: str, verb: str):
    need = ADMIN if verb == "commit" else OPERATOR
    if not has_role(request.user, need):
        messages.error(request, f"{verb} needs the {need} role")
        return redirect("cluster:overview")
    if verb == "commit" and request.POST.get("confirm") != "COMMIT":
        messages.error(request, "Type COMMIT to confirm a commit.")
        return redirect("cluster:overview")
    try:
        actions.decide(node, transaction_id, verb, request.user,
                        request.POST.get("reason", ""), request)  # fmt: skip
    except BrokerError as exc:
        messages.error(
            request, f"{verb} of {transaction_id} on {node} {actions.failed(exc)}"
        )
    except ValueError as exc:
        messages.error(request, f"{verb} of {transaction_id} on {node} failed: {exc}")
    else:
        done = {"commit": "Committed", "rollback": "Rolled back",
                "resume": "Resumed"}.get(verb, verb)  # fmt: skip
        messages.success(request, f"{done} {transaction_id} on {node}.")
    return redirect("cluster:overview")


@require_POST
@viewer_required
def promote(request: HttpRequest, node: str) -> HttpResponse:
    """Promote a slave to master (admins, typing PROMOTE; audited)."""
    if not has_role(request.user, ADMIN):
        messages.error(request, f"Promoting a slave needs the {ADMIN} role")
        return redirect("cluster:overview")
    if request.POST.get("confirm") != "PROMOTE":
        messages.error(request, "Type PROMOTE to confirm a promotion.")
        return redirect("cluster:overview")
    role = request.POST.get("role", "ASYNC_MASTER")
    if role not in ("ASYNC_MASTER", "SYNC_MASTER"):
        messages.error(request, "The new role is ASYNC_MASTER or SYNC_MASTER.")
        return redirect("cluster:overview")
    reason = request.POST.get("reason", "").strip()
    if len(reason) < 3:
        messages.error(request, "Give a reason (it is audited).")
        return redirect("cluster:overview")
    force = request.POST.get("force") == "on"
    try:
        actions.promote(node, role, request.user, reason, force, request)
    except BrokerError as exc:
        messages.error(request, f"{node} was not promoted: {actions.failed(exc)}")
    else:
        messages.success(
            request, f"{node} is now a {role}: clients route to it within seconds."
        )
    return redirect("cluster:overview")
