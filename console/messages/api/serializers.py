from __future__ import annotations

import base64
from typing import Any

from rest_framework import serializers

from broker_core import MessageExt
from broker_core.browse import summary, user_properties


def message_json(m: MessageExt, with_body: bool) -> dict[str, Any]:
    """A message for the API; the body only when the caller may see bodies."""
    out = summary(m) | {"properties": user_properties(m)}
    if with_body:
        out["body_base64"] = base64.b64encode(m.body).decode()
        try:
            out["body_text"] = m.body.decode("utf-8")
        except UnicodeDecodeError:
            out["body_text"] = None
    return out


class ResendSerializer(serializers.Serializer):
    group = serializers.CharField(max_length=120)
    reason = serializers.CharField(min_length=3, max_length=1000)
