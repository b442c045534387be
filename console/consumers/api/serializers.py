from rest_framework import serializers

from broker_core.groups import MAX_ATTEMPTS
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


class GroupSettingsSerializer(serializers.Serializer):
    """A consumer group's settings, as its consumers get them."""

    group = serializers.CharField()
    configured = serializers.BooleanField(
        help_text="false: the group has no settings of its own (the defaults)"
    )
    fifo = serializers.BooleanField(
        help_text="one message in flight per message group, in order"
    )
    max_delivery_attempts = serializers.IntegerField(
        allow_null=True,
        help_text="deliveries before %DLQ%<group>; null: the endpoint's default",
    )
    default_max_delivery_attempts = serializers.IntegerField(
        help_text="the endpoint's default"
    )
    effective_max_delivery_attempts = serializers.IntegerField(
        help_text="the attempts in force"
    )


class GroupSettingsUpdateSerializer(serializers.Serializer):
    """Replace a group's settings (a field left out takes its default)."""

    fifo = serializers.BooleanField(default=False)
    max_delivery_attempts = serializers.IntegerField(
        min_value=1,
        max_value=MAX_ATTEMPTS,
        allow_null=True,
        default=None,
        help_text=f"1..{MAX_ATTEMPTS}; null or left out: the endpoint's default",
        error_messages={
            code: f"give a number of attempts from 1 to {MAX_ATTEMPTS}, or null "
            "for the default"
            for code in ("invalid", "min_value", "max_value")
        },
    )
    reason = serializers.CharField(min_length=3, max_length=1000)
