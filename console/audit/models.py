"""The audit log: one immutable record per console action, allowed or not."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class ImmutableError(Exception):
    """Audit records are written once and never changed or deleted."""


class AuditQuerySet(models.QuerySet):
    def update(self, **kwargs: Any) -> int:
        raise ImmutableError("audit records cannot be updated")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise ImmutableError("audit records cannot be deleted")


class AuditRecord(models.Model):
    class Status(models.TextChoices):
        SUCCESS = "success", "Success"
        FAILED = "failed", "Failed"
        DENIED = "denied", "Denied"

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    #: Kept as text so the record still names the actor after the user is deleted.
    actor_username = models.CharField(max_length=150, blank=True, db_index=True)
    action = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=64, db_index=True)
    object_id = models.CharField(max_length=255, blank=True, db_index=True)
    reason = models.TextField(blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, db_index=True)
    message = models.TextField(blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)

    objects = AuditQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id", "-created_at"])]

    def __str__(self) -> str:
        when = f"{self.created_at:%Y-%m-%d %H:%M:%S}"
        return f"{when} {self.actor_username} {self.action} {self.object_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ImmutableError("audit records cannot be updated")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        raise ImmutableError("audit records cannot be deleted")
