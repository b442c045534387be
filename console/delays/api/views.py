"""``GET /api/delay-levels/``, ``GET /api/delay-scheduled/`` and
``POST /api/delay-scheduled/{id}/cancel/`` (operator)."""

from __future__ import annotations

from dataclasses import asdict

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from console.core.paging import MAX_INT, int_param
from console.delays import services
from console.ui.permissions import HasRole
from console.ui.roles import OPERATOR, VIEWER


class CancelSerializer(serializers.Serializer):
    reason = serializers.CharField(min_length=3, max_length=1000)


class DelayLevelsView(APIView):
    permission_classes = [HasRole]
    read_role = VIEWER

    @extend_schema(responses=dict)
    def get(self, request):
        return Response(services.delay_stats().as_json())


class ScheduledListView(APIView):
    permission_classes = [HasRole]
    read_role = VIEWER

    @extend_schema(
        parameters=[
            OpenApiParameter("kind", str, enum=["level", "timer"]),
            OpenApiParameter("level", int),
            OpenApiParameter("limit", int),
            OpenApiParameter("start", int),
        ],
        responses=dict,
    )
    def get(self, request):
        p = request.query_params
        try:
            level = int(p["level"]) if p.get("level") else None
            limit = min(max(1, int(p.get("limit", 50))), 500)
            start = max(0, int(p.get("start", 0)))
        except ValueError as exc:
            raise serializers.ValidationError(
                "level, limit and start are integers"
            ) from exc
        # Within what the node can hold: refused here, not overflowed there.
        int_param(start, "start")
        if level is not None:
            int_param(level, "level", low=-MAX_INT)
        kind = p.get("kind") or None
        if kind not in (None, "level", "timer"):
            raise serializers.ValidationError('kind is "level" or "timer"')
        rows = services.list_scheduled(kind, level, limit, start)
        return Response({"results": [asdict(r) | {"kind": r.kind.value} for r in rows]})


class CancelView(APIView):
    permission_classes = [HasRole]
    write_role = OPERATOR

    @extend_schema(request=CancelSerializer, responses=dict)
    def post(self, request, msg_id: str):
        s = CancelSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        r = services.cancel_scheduled(
            actor=request.user,
            request=request,
            msg_id=msg_id,
            reason=s.validated_data["reason"],
        )
        return Response(asdict(r) | {"kind": r.kind.value})
