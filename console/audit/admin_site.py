"""The Django admin, audited: every change made through it is an audit record.

The console's own pages and API write their audit records themselves; the
admin (users and groups, API tokens, periodic tasks, login lock-outs) would
otherwise change things with only Django's own ``LogEntry`` to show for it.
``AuditedAdminSite`` wraps each registered ``ModelAdmin`` so that additions,
changes (passwords included), deletions and bulk actions are recorded with
the actor, the client address and the request id, as ``admin.add``,
``admin.change``, ``admin.delete`` and ``admin.action``.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin


def record_audit(**kw: Any) -> None:
    from console.audit.services import record_audit as record

    record(**kw)


def _kind(obj: Any) -> str:
    meta = obj._meta
    return f"{meta.app_label}.{meta.model_name}"


def _message(message: Any) -> str:
    if isinstance(message, list):  # the admin's structured change message
        parts = []
        for item in message:
            for verb, detail in item.items():
                fields = ", ".join(detail.get("fields", [])) if detail else ""
                name = detail.get("name", "") if detail else ""
                parts.append(" ".join(p for p in (verb, name, fields) if p))
        return "; ".join(parts)
    return str(message or "")


class AuditedModelAdmin:
    """Mixed in before each registered ``ModelAdmin`` by ``AuditedAdminSite``."""

    def log_addition(self, request: Any, obj: Any, message: Any) -> Any:
        entry = super().log_addition(request, obj, message)  # type: ignore[misc]
        record_audit(
            actor=request.user, action="admin.add", object_type=_kind(obj),
            object_id=str(obj.pk), after={"object": str(obj)},
            message=_message(message), request=request,
        )  # fmt: skip
        return entry

    def log_change(self, request: Any, obj: Any, message: Any) -> Any:
        entry = super().log_change(request, obj, message)  # type: ignore[misc]
        record_audit(
            actor=request.user, action="admin.change", object_type=_kind(obj),
            object_id=str(obj.pk), after={"object": str(obj)},
            message=_message(message) or "no fields changed", request=request,
        )  # fmt: skip
        return entry

    def log_deletions(self, request: Any, queryset: Any) -> Any:
        objs = list(queryset)
        entries = super().log_deletions(request, objs)  # type: ignore[misc]
        for obj in objs:
            record_audit(
                actor=request.user, action="admin.delete", object_type=_kind(obj),
                object_id=str(obj.pk), before={"object": str(obj)}, request=request,
            )  # fmt: skip
        return entries

    def response_action(self, request: Any, queryset: Any) -> Any:
        # Bulk actions (enable tasks, reset lock-outs, ...) other than the
        # delete, whose deletions are recorded one by one above.
        name = request.POST.get("action", "")
        selected = request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME)
        response = super().response_action(request, queryset)  # type: ignore[misc]
        if name and name != "delete_selected" and selected:
            record_audit(
                actor=request.user, action="admin.action",
                object_type=self.model._meta.label_lower,  # type: ignore[attr-defined]
                object_id=",".join(selected)[:255], after={"action": name},
                message=f"{name} on {len(selected)} object(s)", request=request,
            )  # fmt: skip
        return response


class AuditedAdminSite(admin.AdminSite):
    def register(self, model_or_iterable: Any, admin_class: Any = None, **options: Any):
        base = admin_class or admin.ModelAdmin
        audited = type(f"Audited{base.__name__}", (AuditedModelAdmin, base), {})
        return super().register(model_or_iterable, audited, **options)
