"""The cluster page: nodes, replication lag, every master's pending halves
with commit (admins) and roll back (operators), each sent to its node, and
every master's consumer lag and delay levels, with the node shown."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from console.cluster import services
from console.ui.permissions import admin_required, viewer_required
from console.ui.roles import ADMIN, OPERATOR, has_role


@viewer_required
def cluster(request: HttpRequest) -> HttpResponse:
    context = {"enabled": services.enabled(), "cluster": "", "nodes": [],
               "halves": [], "lag": [], "delays": [], "errors": []}  # fmt: skip
    if context["enabled"]:
        from django.conf import settings

        context["cluster"] = settings.BROKER_CLUSTER
        try:
            state = services.cluster_state()
        except Exception as exc:  # noqa: BLE001 - the registry is away
            context["errors"] = [f"route registry: {exc}"]
        else:
            context.update(
                nodes=state.nodes,
                halves=state.halves,
                lag=state.lag,
                delays=state.delays,
                errors=state.errors,
            )
    context["can_commit"] = has_role(request.user, ADMIN)
    context["can_rollback"] = has_role(request.user, OPERATOR)
    return render(request, "cluster/cluster.html", context)


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
    done = services.put_topic(chosen, name, queues, request.user, request)
    text = "; ".join(f"{n}: {r}" for n, r in done.items())
    ok = all(r in ("created", "updated") for r in done.values())
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
        services.decide(node, transaction_id, verb, request.user,
                        request.POST.get("reason", ""), request)  # fmt: skip
    except (services.NodeUnavailable, ValueError) as exc:
        messages.error(request, f"{verb} of {transaction_id} on {node} failed: {exc}")
    else:
        done = "Committed" if verb == "commit" else "Rolled back"
        messages.success(request, f"{done} {transaction_id} on {node}.")
    return redirect("cluster:overview")
