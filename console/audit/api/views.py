"""``GET /api/audit/`` and ``GET /api/audit/{id}/``: read only, for every role."""

from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import viewsets
from rest_framework.filters import OrderingFilter

from console.audit.api.serializers import AuditRecordSerializer
from console.audit.filtersets import AuditRecordFilterSet
from console.audit.models import AuditRecord
from console.audit.views import SORTABLE
from console.ui.permissions import HasRole
from console.ui.roles import VIEWER


class AuditRecordViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = AuditRecord.objects.all()
    serializer_class = AuditRecordSerializer
    filterset_class = AuditRecordFilterSet
    filter_backends = [DjangoFilterBackend, OrderingFilter]
    ordering_fields = SORTABLE
    ordering = ["-created_at"]
    permission_classes = [HasRole]
    read_role = VIEWER
