from __future__ import annotations

import base64
from typing import Any

from rest_framework import serializers

from broker_core.transaction import HalfDetail, HalfInfo


def half_json(info: HalfInfo) -> dict[str, Any]:
    return {
        "id": info.transaction_id,
        "msg_id": info.msg_id,
        "producer_group": info.producer_group,
        "topic": info.topic,
        "queue_id": info.queue_id,
        "tags": info.tags,
        "keys": info.keys,
        "born_timestamp": info.born_timestamp,
        "check_count": info.check_count,
        "last_check_at": info.last_check_at,
        "next_check_at": info.next_check_at,
        "state": info.state.value,
        "outcome_at": info.outcome_at,
        "outcome_source": info.outcome_source.value if info.outcome_source else None,
        "operator": info.operator,
        "commit_offset_msg_id": info.commit_offset_msg_id,
        "discard_reason": info.discard_reason,
    }


def detail_json(half: HalfDetail, with_body: bool) -> dict[str, Any]:
    out = half_json(half.info) | {
        "properties": dict(half.properties),
        "history": [
            {
                "at": e.at,
                "kind": e.kind,
                "source": e.source,
                "operator": e.operator,
                "transport": e.transport,
                "target": e.target,
                "answer": e.answer,
                "latency_ms": e.latency_ms,
                "check_no": e.check_no,
                "detail": e.detail,
            }
            for e in half.history
        ],
    }
    if with_body:
        out["body_base64"] = base64.b64encode(half.body).decode()
        try:
            out["body_text"] = half.body.decode("utf-8")
        except UnicodeDecodeError:
            out["body_text"] = None
    return out


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(min_length=3, max_length=1000)


class OptionalReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=1000)


class CommitSerializer(ReasonSerializer):
    confirm = serializers.CharField(help_text='must be "COMMIT"')

    def validate_confirm(self, value: str) -> str:
        if value != "COMMIT":
            raise serializers.ValidationError('type "COMMIT" to commit')
        return value


class BulkRollbackSerializer(ReasonSerializer):
    ids = serializers.ListField(child=serializers.CharField(), max_length=1000)
