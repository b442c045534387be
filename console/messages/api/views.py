"""``/api/messages/search/``, ``/api/messages/{id}/`` and ``.../resend/``."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from console.core.paging import MAX_INT, int_param
from console.messages import services
from console.messages.api.serializers import ResendSerializer, message_json
from console.ui.permissions import HasRole
from console.ui.roles import OPERATOR, VIEWER, can_see_bodies

_SEARCH_PARAMS = [
    OpenApiParameter(n, str) for n in ("topic", "msg_id", "key", "tag", "sql", "cursor")
] + [OpenApiParameter(n, int) for n in ("queue_id", "begin_ms", "end_ms", "limit")]


def _int(value: str | None, name: str) -> int | None:
    # An integer within what the node can hold (``console.core.paging``).
    return int_param(value, name, low=-MAX_INT)


class MessageSearchView(APIView):
    permission_classes = [HasRole]
    read_role = VIEWER

    @extend_schema(parameters=_SEARCH_PARAMS, responses=dict)
    def get(self, request):
        p = request.query_params
        limit = min(_int(p.get("limit"), "limit") or 50, 200)
        page = services.search_messages(
            topic=p.get("topic", ""),
            msg_id=p.get("msg_id", ""),
            key=p.get("key", ""),
            tag=p.get("tag", ""),
            sql=p.get("sql", ""),
            queue_id=_int(p.get("queue_id"), "queue_id"),
            begin_ms=_int(p.get("begin_ms"), "begin_ms"),
            end_ms=_int(p.get("end_ms"), "end_ms"),
            limit=limit,
            cursor=p.get("cursor"),
        )
        with_body = can_see_bodies(request.user)
        return Response(
            {
                "results": [message_json(m, with_body) for m in page.messages],
                "cursor": page.cursor,
                "scanned": page.scanned,
            }
        )


class MessageDetailView(APIView):
    permission_classes = [HasRole]
    read_role = VIEWER

    @extend_schema(responses=dict)
    def get(self, request, msg_id: str):
        msg = services.find_message(msg_id)
        return Response(message_json(msg, can_see_bodies(request.user)))


class MessageResendView(APIView):
    permission_classes = [HasRole]
    write_role = OPERATOR

    @extend_schema(request=ResendSerializer, responses={201: dict})
    def post(self, request, msg_id: str):
        s = ResendSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        r = services.resend_message(
            actor=request.user, request=request, msg_id=msg_id, **s.validated_data
        )
        return Response(
            {
                "retry_topic": f"%RETRY%{s.validated_data['group']}",
                "queue_offset": r.queue_offset,
            },
            status=status.HTTP_201_CREATED,
        )
