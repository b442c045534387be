"""Audit records in Django admin: read-only, never added, changed or deleted."""

from django.contrib import admin

from console.audit.models import AuditRecord


@admin.register(AuditRecord)
class AuditRecordAdmin(admin.ModelAdmin):
    list_display = (
        "created_at",
        "actor_username",
        "action",
        "object_type",
        "object_id",
        "status",
    )
    list_filter = ("status", "action", "object_type")
    search_fields = ("actor_username", "action", "object_id", "reason", "message")
    date_hierarchy = "created_at"

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
