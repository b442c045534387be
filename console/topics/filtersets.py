"""One FilterSet for the topic list page and ``GET /api/topics/``."""

import django_filters

from console.topics.forms import TYPE_CHOICES
from console.topics.models import Topic


class TopicFilterSet(django_filters.FilterSet):
    q = django_filters.CharFilter(
        field_name="name", lookup_expr="icontains", label="Name"
    )
    message_type = django_filters.ChoiceFilter(choices=TYPE_CHOICES, label="Type")
    system = django_filters.BooleanFilter(
        label="Internal", widget=django_filters.widgets.BooleanWidget()
    )

    class Meta:
        model = Topic
        fields = ["q", "message_type", "system"]
