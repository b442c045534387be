"""The node whose store the single-store pages show (Transactions, Messages,
Topics, Consumer and Producer groups, Delay queues) on a console managing a
cluster: the operator picks it in the banner of those pages; it is kept in the
session, and every store operation of the request goes to that node's admin
API (``brokerlink.node_ops``). No node picked: the console's own store or
``BROKER_ADMIN_URL``'s node, as on a single host.

A node that does not answer is a 503 page saying which node and why (one
wording, ``nodes.unanswered``), with the picker to choose another, instead of
a server error; a picked node that is no longer live (it stopped
heartbeating) is a 404 page saying so.

The REST API takes the node per request instead: the ``X-Broker-Node`` header
(``broker-b``, or ``broker-a:1`` for a slave); without it, the console's own
store. A name that is not a live node is the API's 404 ``node_not_found``, a
live node that does not answer its 503 ``node_unavailable``. Without a
cluster the header may name only the console's own node (``BROKER_NODE``,
default ``local``); any other name is 404 ``node_not_found`` too, never
silently the console's own store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from broker_core.cluster.node_ops import NodeOperations, NodeUnavailableError
from console.cluster.scope import (
    chosen_node,
    enabled,
    master_required,
    own_node,
    showing,
)
from console.ui.permissions import viewer_required

SESSION_KEY = "console_node"


def node_ops_of(node: str) -> NodeOperations:
    """The operations of the live node ``node`` (``name`` or
    ``name:broker_id``) through its registered admin API (a master's only
    within ``showing(node, master=True)``). ``NodeNotFoundError`` for a name
    that is no live node, ``NodeUnavailableError`` (``nodes.unanswered``)
    when it does not answer."""
    from console.cluster import nodes

    if not enabled():
        # No cluster: the only node is the console's own, which is no
        # "picked" node (``NodeChoiceMiddleware``); any other name is none.
        raise nodes.NodeNotFoundError(
            f"node {node} is not a node of this console: it manages no "
            f"cluster (BROKER_CLUSTER), only its own node {own_node()}"
        )
    return nodes.ops_of(node, master=master_required())


def node_choices() -> list[str]:
    """The live nodes to pick from: a master by its name, a slave as
    ``name:broker_id``; [] when the registry does not answer."""
    from console.cluster import nodes

    try:
        found = nodes.registry().nodes()
    except Exception:  # noqa: BLE001 - the banner says the registry is away
        return []
    return sorted(n.name if n.broker_id == 0 else n.key for n in found)


class NodeChoiceMiddleware:
    """Carry the session's picked node through the request (module doc)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        node = ""
        if request.path.startswith("/api/"):
            node = request.headers.get("X-Broker-Node", "").strip()
            if not enabled() and node in (own_node(), f"{own_node()}:0"):
                node = ""  # no cluster: the console's own node, by its name
            # No cluster and another name: that node, which ``node_ops_of``
            # refuses (404 ``node_not_found``) when the request asks it.
        elif enabled() and hasattr(request, "session"):
            node = str(request.session.get(SESSION_KEY, "") or "")
        with showing(node):
            return self.get_response(request)

    def process_exception(
        self, request: HttpRequest, exc: Exception
    ) -> HttpResponse | None:
        if not isinstance(exc, NodeUnavailableError):
            return None
        if request.path.startswith("/api/"):
            return None  # the API's exception handler answers it as JSON
        from console.cluster.nodes import NodeFailedError, NodeNotFoundError, describe

        return render(
            request,
            "cluster/node_unavailable.html",
            {
                "reason": describe(exc),
                "node": chosen_node(),
                "not_found": isinstance(exc, NodeNotFoundError),
                "failed": isinstance(exc, NodeFailedError),
            },
            status=exc.http_status,
        )


@require_POST
@viewer_required
def pick(request: HttpRequest) -> HttpResponse:
    """Show the single-store pages for ``node`` ("": the console's own)."""
    node = request.POST.get("node", "").strip()
    if node and node not in node_choices():
        from django.contrib import messages

        messages.error(request, f"{node} is not a live node of the cluster.")
        node = ""
    request.session[SESSION_KEY] = node
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = "/"
    return redirect(target)


def scope(request: HttpRequest) -> dict[str, Any]:
    """The banner's figures: the picked node and the nodes to pick from."""
    return {"chosen": chosen_node(), "choices": node_choices()}
