"""The Cluster page's forms: search a node's messages, reset a group's
offsets on a node, cancel a delayed message on a node."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.validators import RegexValidator

from console.ui.forms import LocalDateTimeField, ReasonField

_MSG_ID = RegexValidator(r"^[0-9A-Fa-f]{1,64}$", "A message id is hexadecimal.")


class SearchForm(forms.Form):
    """By message id, or by topic and key (a topic alone: its newest)."""

    search_node = forms.CharField(max_length=200, label="Node")
    topic = forms.CharField(max_length=255, required=False)
    key = forms.CharField(max_length=255, required=False)
    msg_id = forms.CharField(
        max_length=64, required=False, label="Message id", validators=[_MSG_ID]
    )

    def clean(self) -> dict[str, Any]:
        d = super().clean()
        if not (d.get("msg_id") or d.get("topic")):
            raise forms.ValidationError("Give a message id, or a topic (and a key).")
        return d


class ResetForm(forms.Form):
    """To an offset or to a time, one queue or every queue of the topic."""

    node = forms.CharField(max_length=200)
    group = forms.CharField(max_length=255)
    topic = forms.CharField(max_length=255)
    offset = forms.IntegerField(required=False, min_value=0)
    at = LocalDateTimeField(required=False, label="Time")
    queue_id = forms.IntegerField(required=False, min_value=0, label="Queue")
    reason = ReasonField()

    def clean(self) -> dict[str, Any]:
        d = super().clean()
        if (d.get("offset") is None) == (d.get("at") is None):
            raise forms.ValidationError("Give either an offset or a time.")
        return d


class CancelForm(forms.Form):
    node = forms.CharField(max_length=200)
    msg_id = forms.CharField(max_length=64, label="Message id", validators=[_MSG_ID])
    reason = ReasonField()
