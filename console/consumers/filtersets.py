"""One FilterSet for the consumer group page and ``GET /api/consumer-groups/``."""

import django_filters

from console.consumers.models import ConsumerQueue


class ConsumerQueueFilterSet(django_filters.FilterSet):
    group = django_filters.CharFilter(lookup_expr="icontains", label="Group")
    topic = django_filters.CharFilter(lookup_expr="exact", label="Topic")
    min_lag = django_filters.NumberFilter(
        field_name="lag", lookup_expr="gte", label="Lag at least"
    )

    class Meta:
        model = ConsumerQueue
        fields = ["group", "topic", "min_lag"]
