"""Say, on the pages that show one store, whose store that is when the console
manages a cluster, and let the operator pick another node's
(``console.cluster.picker``): an operator must not take one node's figures
for the cluster's."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest

#: Apps whose pages show one store (the picked node's, else the console's own).
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
    from console.cluster.picker import scope

    return {
        "store_scope": {
            "cluster": cluster,
            "node": getattr(settings, "BROKER_NODE", ""),
            "store": getattr(settings, "BROKER_ADMIN_URL", "")
            or str(settings.BROKER_STORE_DIR),
            "next": request.get_full_path(),
            **scope(request),
        }
    }
