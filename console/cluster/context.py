"""Say, on the pages that read one store, which store that is when the console
manages a cluster: those pages do not go through the nodes' admin APIs, and
an operator must not take one node's figures for the cluster's."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest

#: Apps whose pages read the store of this host (``BROKER_STORE_DIR``).
STORE_APPS = frozenset(
    {"topics", "messages", "consumers", "delays", "transactions", "producers"}
)


def store_scope(request: HttpRequest) -> dict[str, Any]:
    cluster = getattr(settings, "BROKER_CLUSTER", "")
    match = request.resolver_match
    if not cluster or match is None:
        return {}
    if match.app_name not in STORE_APPS and match.view_name != "overview":
        return {}
    return {
        "store_scope": {
            "cluster": cluster,
            "node": getattr(settings, "BROKER_NODE", ""),
            "store": str(settings.BROKER_STORE_DIR),
        }
    }
