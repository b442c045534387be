"""``GET /api/cluster/`` (what the Cluster page shows: every live node, and
every master's pending halves, consumer lag and delay levels, with the node
named) and ``GET /api/cluster/nodes/{name:id}/`` (one node's page), for
scripts and monitoring. Viewers and up; the actions stay on the page's forms
and the per-store API (``X-Broker-Node``)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from broker_core.cluster.node_ops import NodeUnavailableError
from console.cluster import node_detail, nodes
from console.cluster.state import NodeView, cluster_state
from console.ui.permissions import HasRole
from console.ui.roles import VIEWER


class RegistryUnavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "registry_unavailable"


def _cluster_name() -> str:
    if not nodes.enabled():
        raise NotFound("this console manages a single node: BROKER_CLUSTER is empty")
    return settings.BROKER_CLUSTER


def _node(view: NodeView) -> dict[str, Any]:
    return {"key": view.key, "is_master": view.is_master, **asdict(view)}


class ClusterView(APIView):
    permission_classes = [HasRole]
    read_role = VIEWER

    @extend_schema(responses=dict)
    def get(self, request):
        cluster = _cluster_name()
        try:
            state = cluster_state()
        except Exception as exc:  # noqa: BLE001 - the registry is away
            raise RegistryUnavailable(
                f"the route registry does not answer: {exc}"
            ) from exc
        return Response(
            {
                "cluster": cluster,
                "nodes": [_node(v) for v in state.nodes],
                "halves": state.halves,
                "discarded": state.discarded,
                "lag": state.lag,
                "delays": state.delays,
                "transactions": state.transactions,
                "errors": state.errors,
            }
        )


class ClusterNodeView(APIView):
    permission_classes = [HasRole]
    read_role = VIEWER

    @extend_schema(responses=dict)
    def get(self, request, key: str):
        _cluster_name()
        if node_detail.parse_key(key) is None:
            raise NotFound(
                f"{key!r} is not a node key (a broker name and id: broker-a:0)"
            )
        try:
            detail = node_detail.node_detail(key)
        except NodeUnavailableError as exc:
            raise RegistryUnavailable(
                f"the route registry does not answer: {exc}"
            ) from exc
        if detail is None:
            raise nodes.not_live(key)  # 404 node_not_found, as X-Broker-Node
        body = asdict(detail)
        body["node"] = _node(detail.node)
        return Response(body)
