"""One FilterSet for the audit page and ``GET /api/audit/``."""

import django_filters
from django.db.models import Q

from console.audit.models import AuditRecord


class AuditRecordFilterSet(django_filters.FilterSet):
    q = django_filters.CharFilter(method="search", label="Search")
    actor = django_filters.CharFilter(field_name="actor_username", label="User")
    action = django_filters.CharFilter(lookup_expr="startswith")
    object_type = django_filters.CharFilter()
    object_id = django_filters.CharFilter()
    status = django_filters.ChoiceFilter(choices=AuditRecord.Status.choices)
    since = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditRecord
        fields = [
            "q",
            "actor",
            "action",
            "object_type",
            "object_id",
            "status",
            "since",
            "until",
        ]

    def search(self, queryset, name, value):
        return queryset.filter(
            Q(actor_username__icontains=value)
            | Q(action__icontains=value)
            | Q(object_id__icontains=value)
            | Q(reason__icontains=value)
            | Q(message__icontains=value)
        )
