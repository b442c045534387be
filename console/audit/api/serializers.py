from rest_framework import serializers

from console.audit.models import AuditRecord


class AuditRecordSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditRecord
        fields = [
            "id",
            "created_at",
            "actor_username",
            "action",
            "object_type",
            "object_id",
            "reason",
            "before",
            "after",
            "status",
            "message",
            "request_id",
            "ip",
        ]
        read_only_fields = fields
