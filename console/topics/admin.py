from django.contrib import admin

from console.topics.models import Topic
from console.ui.admin_mixins import ReadOnlyAdmin


@admin.register(Topic)
class TopicAdmin(ReadOnlyAdmin, admin.ModelAdmin):
    list_display = (
        "name",
        "message_type",
        "queues",
        "perm",
        "messages",
        "produce_rate",
        "system",
        "synced_at",
    )
    list_filter = ("message_type", "system")
    search_fields = ("name",)
