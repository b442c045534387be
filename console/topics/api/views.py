"""``/api/topics/``: list and read for every role; create, update and delete for
admins; ``send`` and queue browsing as actions."""

from __future__ import annotations

from django.http import Http404
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.filters import OrderingFilter
from rest_framework.response import Response

from console.core.paging import MAX_INT, int_param
from console.messages import services as message_services
from console.messages.api.serializers import message_json
from console.topics import services
from console.topics.api.serializers import (
    SendSerializer,
    TopicDeleteSerializer,
    TopicSerializer,
    TopicUpdateSerializer,
    TopicWriteSerializer,
)
from console.topics.filtersets import TopicFilterSet
from console.topics.models import Topic
from console.topics.views import SORTABLE
from console.ui.permissions import HasRole
from console.ui.roles import ADMIN, OPERATOR, VIEWER, can_see_bodies


class TopicViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = TopicSerializer
    lookup_field = "name"
    lookup_value_regex = r"[%|a-zA-Z0-9_-]+"
    filterset_class = TopicFilterSet
    filter_backends = [DjangoFilterBackend, OrderingFilter]
    ordering_fields = SORTABLE
    ordering = ["name"]
    permission_classes = [HasRole]
    action_roles = {
        "list": VIEWER,
        "retrieve": VIEWER,
        "messages": VIEWER,
        "create": ADMIN,
        "partial_update": ADMIN,
        "destroy": ADMIN,
        "send": OPERATOR,
    }

    def get_queryset(self):
        # Per request, not at import: the rows are those of the store this
        # request shows (``Topic.objects``, X-Broker-Node), brought up to date.
        if not getattr(self, "swagger_fake_view", False):
            services.sync_topics()
        return Topic.objects.all()

    def get_object(self):
        """The topic's row; a topic the table does not have is asked of the
        node, whose ``TopicNotFoundError`` (404 ``topic_not_found``, "topic
        'X' does not exist") answers, as the node's admin API and the other
        pages do. One created on the node since the last sync is synced."""
        try:
            return super().get_object()
        except Http404:
            services.get_topic(self.kwargs[self.lookup_field])  # raises if none
            services.sync_topics(force=True)
            return super().get_object()

    @extend_schema(request=TopicWriteSerializer, responses={201: TopicSerializer})
    def create(self, request):
        s = TopicWriteSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        services.create_topic(actor=request.user, request=request, **s.validated_data)
        topic = Topic.objects.get(name=s.validated_data["name"])
        return Response(TopicSerializer(topic).data, status=status.HTTP_201_CREATED)

    # The actions below (edit, delete, test send) look the topic up within
    # their audited action (the services' ``before``, or the send's own
    # look-up), never first with ``get_object``: a topic the node does not
    # have (404 ``topic_not_found``) or a node that does not answer (503)
    # is the action's failure, one FAILED record, not a refusal unrecorded.

    @extend_schema(request=TopicUpdateSerializer, responses=TopicSerializer)
    def partial_update(self, request, name=None):
        name = self.kwargs[self.lookup_field]
        s = TopicUpdateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        data = dict(s.validated_data)
        reason = data.pop("reason", "")
        if data:
            services.update_topic(
                actor=request.user,
                request=request,
                name=name,
                reason=reason,
                **data,
            )
        return Response(TopicSerializer(self.get_object()).data)

    @extend_schema(request=TopicDeleteSerializer, responses={204: None})
    def destroy(self, request, name=None):
        name = self.kwargs[self.lookup_field]
        s = TopicDeleteSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        services.delete_topic(
            actor=request.user,
            request=request,
            name=name,
            reason=s.validated_data["reason"],
        )
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=SendSerializer, responses={201: dict})
    @action(detail=True, methods=["post"])
    def send(self, request, name=None):
        name = self.kwargs[self.lookup_field]
        s = SendSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        r = message_services.send_test_message(
            actor=request.user,
            request=request,
            topic=name,
            body=d["body"].encode(),
            tags=d["tags"],
            keys=d["keys"],
            properties=d["properties"],
        )
        return Response(
            {
                "msg_id": r.msg_id,
                "offset_msg_id": r.offset_msg_id,
                "queue_id": r.queue_id,
                "queue_offset": r.queue_offset,
                "status": r.status.value,
            },
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(
        parameters=[
            OpenApiParameter("queue_id", int, required=True),
            OpenApiParameter("offset", int),
            OpenApiParameter("at_ms", int),
            OpenApiParameter("count", int),
        ],
        responses=dict,
    )
    @action(detail=True, methods=["get"])
    def messages(self, request, name=None):
        """Browse one queue from an offset or a time (ms); bodies for operators."""
        topic = self.get_object()
        p = request.query_params
        try:
            qid = int(p["queue_id"])
            offset = int(p["offset"]) if p.get("offset") else None
            at_ms = int(p["at_ms"]) if p.get("at_ms") else None
            count = int(p.get("count", 50))
            # Within what the node can hold: refused here (400), not
            # overflowed there.
            for name, value in (
                ("queue_id", qid),
                ("offset", offset),
                ("at_ms", at_ms),
                ("count", count),
            ):
                int_param(value, name, low=-MAX_INT)
            page = message_services.browse_queue(
                topic.name, qid, offset=offset, at_ms=at_ms, count=count
            )
        except (KeyError, ValueError) as exc:
            raise Http404("queue_id, offset, at_ms and count must be integers") from exc
        with_body = can_see_bodies(request.user)
        return Response(
            {
                "topic": topic.name,
                "queue_id": qid,
                "min_offset": page.min_offset,
                "max_offset": page.max_offset,
                "start": page.start,
                "next_offset": page.next_start,
                "messages": [message_json(m, with_body) for m in page.messages],
            }
        )
