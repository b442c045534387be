from __future__ import annotations

from django import forms

from console.ui.forms import LocalDateTimeField, ReasonField


class SearchForm(forms.Form):
    topic = forms.CharField(required=False, max_length=255)
    msg_id = forms.CharField(required=False, max_length=64, label="Message id")
    key = forms.CharField(required=False, max_length=255)
    tag = forms.CharField(required=False, max_length=255, help_text="a || b")
    sql = forms.CharField(
        required=False,
        max_length=2000,
        label="SQL92",
        widget=forms.TextInput(attrs={"size": 40}),
    )
    begin = LocalDateTimeField(required=False, label="From")
    end = LocalDateTimeField(required=False, label="To")

    def has_query(self) -> bool:
        d = self.cleaned_data
        return any(d.get(k) for k in ("msg_id", "key", "tag", "sql")) or bool(
            d.get("topic")
        )


class ResendForm(forms.Form):
    group = forms.CharField(max_length=120, label="Consumer group")
    reason = ReasonField()
