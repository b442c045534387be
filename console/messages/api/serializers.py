from __future__ import annotations

from typing import Any

from rest_framework import serializers

from broker_core import MessageExt
from broker_core.browse import message_json as browse_json


def message_json(m: MessageExt, with_body: bool) -> dict[str, Any]:
    """A message for the API (``broker_core.browse.message_json``, as the
    node's admin API gives it, without a preview); the body, as base64 and as
    text when it is UTF-8, only when the caller may see bodies."""
    out = browse_json(m, preview_bytes=0, with_base64=with_body)
    if with_body:
        try:
            out["body_text"] = m.body.decode("utf-8")
        except UnicodeDecodeError:
            out["body_text"] = None
    return out


class ResendSerializer(serializers.Serializer):
    group = serializers.CharField(max_length=120)
    reason = serializers.CharField(min_length=3, max_length=1000)
