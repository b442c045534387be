"""API plumbing shared by every app: errors as JSON with a code and a message."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from broker_core import errors


def http_status_for(exc: errors.BrokerError) -> int:
    """Return the HTTP status that answers a broker error: its class's own
    (``broker_core.errors``), the same the node's admin API answers."""
    return exc.http_status


def _summary(detail: Any) -> str:
    """One line from a serializer's errors: "reason: This field is required."."""
    if isinstance(detail, dict):
        parts = []
        for name, errs in detail.items():
            first = errs[0] if isinstance(errs, list) and errs else errs
            text = _summary(first) if isinstance(first, dict | list) else str(first)
            parts.append(text if name == "non_field_errors" else f"{name}: {text}")
        return "; ".join(parts) or "Invalid input."
    if isinstance(detail, list) and detail:
        return str(detail[0])
    return "Invalid input."


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Answer every API error as ``{"code": ..., "message": ...}``."""
    if isinstance(exc, errors.BrokerError):
        from console.cluster.nodes import describe

        # A node that could not be asked: the one wording of
        # ``console.cluster.nodes`` (also the pages').
        return Response(
            {"code": exc.code, "message": describe(exc)}, status=http_status_for(exc)
        )
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    detail = response.data
    code = getattr(exc, "default_code", "error")
    if isinstance(detail, dict) and "detail" in detail:
        message = str(detail["detail"])
        code = getattr(detail["detail"], "code", code)
        response.data = {"code": code, "message": message}
    else:
        response.data = {
            "code": code,
            "message": _summary(detail),
            "fields": detail,
        }
    return response
