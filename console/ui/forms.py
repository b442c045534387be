"""Form pieces shared by console apps."""

from __future__ import annotations

import datetime as dt

from django import forms
from django.utils import timezone
from django.utils.functional import lazy


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


_zone_help = lazy(lambda: f"ISO, {timezone.get_current_timezone_name()}", str)


class LocalDateTimeField(forms.DateTimeField):
    """An ISO date and time (``2026-11-23 21:04:05``), read in the console's
    time zone (``TIME_ZONE``, UTC by default), which the help text names.

    A text input, not ``datetime-local``: browsers show that in their locale's
    order (month first in the US), which misleads at 3 a.m.
    """

    widget = forms.DateTimeInput(
        attrs={
            "placeholder": "YYYY-MM-DD HH:MM:SS",
            "pattern": r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?",
            "spellcheck": "false",
            "autocomplete": "off",
        },
        format="%Y-%m-%d %H:%M:%S",
    )

    def __init__(self, **kwargs):
        kwargs.setdefault(
            "input_formats",
            ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S",
             "%Y-%m-%d %H:%M", "%Y-%m-%d"],
        )  # fmt: skip
        # Lazy: the zone of the request rendering the form (the user's choice).
        kwargs.setdefault("help_text", _zone_help())
        super().__init__(**kwargs)


def to_ms(value: dt.datetime | None) -> int | None:
    """Return a datetime as epoch milliseconds (None stays None)."""
    if value is None:
        return None
    if timezone.is_naive(value):
        value = timezone.make_aware(value)
    return int(value.timestamp() * 1000)
