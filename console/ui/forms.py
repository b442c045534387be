"""Form pieces shared by console apps."""

from __future__ import annotations

import datetime as dt

from django import forms
from django.utils import timezone


class ReasonField(forms.CharField):
    """A mandatory, free-text reason recorded in the audit log."""

    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", 1000)
        kwargs.setdefault("min_length", 3)
        kwargs.setdefault(
            "widget",
            forms.TextInput(attrs={"size": 50, "placeholder": "why (audited)"}),
        )
        super().__init__(**kwargs)


class LocalDateTimeField(forms.DateTimeField):
    """A ``datetime-local`` input, read in the server's time zone."""

    widget = forms.DateTimeInput(
        attrs={"type": "datetime-local", "step": "1"}, format="%Y-%m-%dT%H:%M:%S"
    )

    def __init__(self, **kwargs):
        kwargs.setdefault(
            "input_formats",
            ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"],
        )
        super().__init__(**kwargs)


def to_ms(value: dt.datetime | None) -> int | None:
    """Return a datetime as epoch milliseconds (None stays None)."""
    if value is None:
        return None
    if timezone.is_naive(value):
        value = timezone.make_aware(value)
    return int(value.timestamp() * 1000)
