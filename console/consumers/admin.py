from django.contrib import admin

from console.consumers.models import ConsumerQueue
from console.ui.admin_mixins import ReadOnlyAdmin


@admin.register(ConsumerQueue)
class ConsumerQueueAdmin(ReadOnlyAdmin, admin.ModelAdmin):
    list_display = (
        "group",
        "topic",
        "queue_id",
        "committed_offset",
        "max_offset",
        "lag",
        "synced_at",
    )
    list_filter = ("topic",)
    search_fields = ("group", "topic")
