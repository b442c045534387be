"""``/api/transactions/``: the pending list (same filters as the page), a half,
commit (admin), rollback, resume and bulk rollback (operator)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from broker_core.errors import ValidationError
from broker_core.transaction import TransactionState
from console.core.paging import int_param, page_number
from console.transactions import services
from console.transactions.api.serializers import (
    BulkRollbackSerializer,
    CommitSerializer,
    OptionalReasonSerializer,
    ReasonSerializer,
    detail_json,
    half_json,
)
from console.transactions.forms import HalfFilterForm
from console.ui.permissions import HasRole
from console.ui.roles import OPERATOR, VIEWER, can_see_bodies

_LIST_PARAMS = [
    OpenApiParameter(n, str) for n in ("producer_group", "topic", "key", "sort")
] + [
    OpenApiParameter(
        "state", str, enum=["PENDING", "DISCARDED", "COMMITTED", "ROLLED_BACK", "ALL"]
    ),
    OpenApiParameter("min_age_minutes", float),
    OpenApiParameter("min_checks", int),
    OpenApiParameter("page", int),
    OpenApiParameter("page_size", int),
]


def _end_json(r) -> dict:
    return {
        "id": r.transaction_id,
        "status": r.status.value,
        "state": r.state.value,
        "source": r.source.value if r.source else None,
        "operator": r.operator,
        "commit_offset_msg_id": r.commit_offset_msg_id,
    }


class TransactionListView(APIView):
    """Halves, default pending; each item's ``id`` names it in the URLs below.
    Bodies appear only in a half's detail, for operators and admins."""

    permission_classes = [HasRole]
    read_role = VIEWER

    @extend_schema(
        operation_id="transactions_list", parameters=_LIST_PARAMS, responses=dict
    )
    def get(self, request):
        fs = HalfFilterForm(request.query_params)
        if not fs.is_valid():
            raise ValidationError(
                "; ".join(f"{k}: {' '.join(v)}" for k, v in fs.errors.items())
            )
        # A page that is no positive integer up to MAX_PAGE: DRF's 404
        # "Invalid page.", never a number the node's index overflows on.
        page = page_number(request.query_params.get("page"))
        size = int_param(
            request.query_params.get("page_size"), "page_size", 50, 1, 1000
        )
        res = services.list_transactions(page=page, page_size=size, **fs.list_kwargs())
        return Response(
            {
                "count": res.total,
                "page": res.page,
                "page_size": res.page_size,
                "results": [
                    half_json(i) | {"stuck": services.is_stuck(i)} for i in res.items
                ],
            }
        )


class TransactionDetailView(APIView):
    permission_classes = [HasRole]
    read_role = VIEWER

    @extend_schema(responses=dict)
    def get(self, request, transaction_id: str):
        half = services.get_transaction(transaction_id)
        return Response(
            detail_json(half, can_see_bodies(request.user))
            | {"stuck": services.is_stuck(half.info)}
        )


class _ActionView(APIView):
    """POST one of ``services.VERBS`` on a half; the subclasses below name it."""

    permission_classes = [HasRole]
    verb: str
    serializer_class: type[serializers.Serializer]

    @property
    def write_role(self) -> str:
        return services.VERBS[self.verb].role

    def post(self, request, transaction_id: str):
        s = self.serializer_class(data=request.data)
        s.is_valid(raise_exception=True)
        result = services.perform(
            self.verb,
            actor=request.user,
            request=request,
            transaction_id=transaction_id,
            reason=s.validated_data.get("reason", ""),
        )
        if isinstance(result, TransactionState):  # resume
            return Response({"id": transaction_id, "state": result.value})
        return Response(_end_json(result))


@extend_schema_view(post=extend_schema(request=CommitSerializer, responses=dict))
class CommitView(_ActionView):
    verb = "commit"
    serializer_class = CommitSerializer


@extend_schema_view(post=extend_schema(request=ReasonSerializer, responses=dict))
class RollbackView(_ActionView):
    verb = "rollback"
    serializer_class = ReasonSerializer


@extend_schema_view(
    post=extend_schema(request=OptionalReasonSerializer, responses=dict)
)
class ResumeView(_ActionView):
    verb = "resume"
    serializer_class = OptionalReasonSerializer


class BulkRollbackView(APIView):
    permission_classes = [HasRole]
    write_role = OPERATOR

    @extend_schema(request=BulkRollbackSerializer, responses=dict)
    def post(self, request):
        s = BulkRollbackSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        res = services.bulk_rollback(
            actor=request.user,
            request=request,
            transaction_ids=s.validated_data["ids"],
            reason=s.validated_data["reason"],
        )
        return Response(
            {
                "rolled_back": res.rolled_back,
                "already": res.already,
                "failed": res.failed,
            }
        )
