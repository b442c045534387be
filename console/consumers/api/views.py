"""``/api/consumer-groups/``: per-queue offsets and lag (the page's FilterSet),
one group, ``reset-offset`` (operator; ``dry_run`` previews) and ``settings``
(FIFO, delivery attempts; admin to change)."""

from __future__ import annotations

from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema
from rest_framework import generics
from rest_framework.filters import OrderingFilter
from rest_framework.response import Response
from rest_framework.views import APIView

from broker_core.errors import GroupNotConsumingError
from broker_core.validation import validate_group
from console.consumers import services
from console.consumers.api.serializers import (
    ConsumerQueueSerializer,
    GroupSettingsSerializer,
    GroupSettingsUpdateSerializer,
    ResetSerializer,
)
from console.consumers.filtersets import ConsumerQueueFilterSet
from console.consumers.models import ConsumerQueue
from console.ui.permissions import HasRole
from console.ui.roles import ADMIN, OPERATOR, VIEWER


class ConsumerQueueListView(generics.ListAPIView):
    """Every (group, topic, queue) with its committed offset and lag."""

    serializer_class = ConsumerQueueSerializer
    filterset_class = ConsumerQueueFilterSet
    filter_backends = [DjangoFilterBackend, OrderingFilter]
    ordering_fields = ["group", "topic", "queue_id", "lag"]
    ordering = ["group", "topic", "queue_id"]
    permission_classes = [HasRole]
    read_role = VIEWER

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return ConsumerQueue.objects.none()  # the schema needs no sync
        services.sync_offsets()
        return ConsumerQueue.objects.all()


class ConsumerGroupDetailView(APIView):
    permission_classes = [HasRole]
    read_role = VIEWER

    @extend_schema(responses=dict)
    def get(self, request, group: str):
        queues = services.group_queues(group)
        if not queues:
            # The node's own error for a group it knows no offsets or
            # subscriptions of (404 ``group_not_consuming``), as a reset says.
            raise GroupNotConsumingError(f"{group!r} consumes no topic on this node")
        return Response(
            {"group": group, "lag": sum(q["lag"] for q in queues), "queues": queues}
        )


class ResetOffsetView(APIView):
    permission_classes = [HasRole]
    write_role = OPERATOR

    @extend_schema(request=ResetSerializer, responses=dict)
    def post(self, request, group: str):
        s = ResetSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        target = {
            "to_offset": d.get("to_offset"),
            "to_ms": d.get("to_ms"),
            "queue_id": d.get("queue_id"),
        }
        if d["dry_run"]:
            changes = services.preview_reset(group, d["topic"], **target)
        else:
            changes = services.reset_offsets(
                actor=request.user,
                request=request,
                group=group,
                topic=d["topic"],
                reason=d["reason"],
                **target,
            )
        return Response(
            {
                "group": group,
                "topic": d["topic"],
                "applied": not d["dry_run"],
                "changes": services.change_dicts(changes),
            }
        )


class GroupSettingsView(APIView):
    """A consumer group's settings: FIFO delivery and how many deliveries a
    message gets before ``%DLQ%<group>``. Any group name has settings (the
    defaults until set); ``PUT`` replaces them (admin, audited) and the node's
    endpoint applies them to the group's next receive."""

    permission_classes = [HasRole]
    read_role = VIEWER
    write_role = ADMIN

    @extend_schema(responses=GroupSettingsSerializer)
    def get(self, request, group: str):
        validate_group(group)
        return Response(GroupSettingsSerializer(services.group_settings(group)).data)

    @extend_schema(
        request=GroupSettingsUpdateSerializer, responses=GroupSettingsSerializer
    )
    def put(self, request, group: str):
        s = GroupSettingsUpdateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        saved = services.update_group_settings(
            actor=request.user,
            request=request,
            group=group,
            fifo=d["fifo"],
            max_delivery_attempts=d["max_delivery_attempts"],
            reason=d["reason"],
        )
        return Response(GroupSettingsSerializer(saved).data)
