from rest_framework import serializers

from console.topics.forms import PERM_CHOICES, TYPE_CHOICES
from console.topics.models import Topic


class TopicSerializer(serializers.ModelSerializer):
    class Meta:
        model = Topic
        fields = [
            "name",
            "read_queue_nums",
            "write_queue_nums",
            "perm",
            "message_type",
            "system",
            "queues",
            "messages",
            "produce_rate",
            "depths",
            "synced_at",
        ]
        read_only_fields = fields


class TopicWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=127)
    read_queue_nums = serializers.IntegerField(min_value=1, max_value=1024, default=4)
    write_queue_nums = serializers.IntegerField(min_value=1, max_value=1024, default=4)
    perm = serializers.ChoiceField(choices=[p for p, _ in PERM_CHOICES], default=6)
    message_type = serializers.ChoiceField(
        choices=[t for t, _ in TYPE_CHOICES], default="NORMAL"
    )
    reason = serializers.CharField(max_length=1000, required=False, default="")


class TopicUpdateSerializer(serializers.Serializer):
    read_queue_nums = serializers.IntegerField(
        min_value=1, max_value=1024, required=False
    )
    write_queue_nums = serializers.IntegerField(
        min_value=1, max_value=1024, required=False
    )
    perm = serializers.ChoiceField(choices=[p for p, _ in PERM_CHOICES], required=False)
    message_type = serializers.ChoiceField(
        choices=[t for t, _ in TYPE_CHOICES], required=False
    )
    reason = serializers.CharField(max_length=1000, required=False, default="")


class TopicDeleteSerializer(serializers.Serializer):
    reason = serializers.CharField(min_length=3, max_length=1000)


class SendSerializer(serializers.Serializer):
    body = serializers.CharField(trim_whitespace=False)
    tags = serializers.CharField(required=False, default="", allow_blank=True)
    keys = serializers.CharField(required=False, default="", allow_blank=True)
    properties = serializers.DictField(
        child=serializers.CharField(), required=False, default=dict
    )
