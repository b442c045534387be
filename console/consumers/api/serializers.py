from rest_framework import serializers

from console.consumers.models import ConsumerQueue


class ConsumerQueueSerializer(serializers.ModelSerializer):
    class Meta:
        model = ConsumerQueue
        fields = [
            "group",
            "topic",
            "queue_id",
            "committed_offset",
            "max_offset",
            "lag",
            "synced_at",
        ]
        read_only_fields = fields


class ResetSerializer(serializers.Serializer):
    topic = serializers.CharField(max_length=255)
    to_offset = serializers.IntegerField(min_value=0, required=False)
    to_ms = serializers.IntegerField(
        min_value=0, required=False, help_text="epoch milliseconds"
    )
    queue_id = serializers.IntegerField(min_value=0, required=False)
    reason = serializers.CharField(max_length=1000, required=False, default="")
    dry_run = serializers.BooleanField(default=False, help_text="only preview")

    def validate(self, data):
        if ("to_offset" in data) == ("to_ms" in data):
            raise serializers.ValidationError("give exactly one of to_offset and to_ms")
        if not data["dry_run"] and len(data["reason"].strip()) < 3:
            raise serializers.ValidationError({"reason": "a reason is required"})
        return data
