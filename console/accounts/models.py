"""Per-user console preferences."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Preference(models.Model):
    """What one user chose for their own pages (today: the time zone)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="console_preference",
    )
    #: An IANA zone name; empty: the console's TIME_ZONE (UTC by default).
    time_zone = models.CharField(max_length=64, blank=True, default="")

    def __str__(self) -> str:
        return f"{self.user} {self.time_zone or '(default zone)'}"
