from __future__ import annotations

from django import forms

from broker_core.groups import MAX_ATTEMPTS
from console.ui.forms import LocalDateTimeField, ReasonField


class ResetForm(forms.Form):
    topic = forms.ChoiceField(choices=[])
    mode = forms.ChoiceField(
        choices=[("time", "to a time"), ("offset", "to an offset")],
        widget=forms.RadioSelect,
        initial="time",
    )
    at = LocalDateTimeField(required=False, label="Time")
    offset = forms.IntegerField(required=False, min_value=0)
    queue_id = forms.IntegerField(
        required=False, min_value=0, label="Queue", help_text="empty: every queue"
    )
    reason = ReasonField(required=False)

    def __init__(self, *args, topics: list[str], need_reason: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["topic"].choices = [(t, t) for t in topics]
        self.fields["reason"].required = need_reason

    def clean(self):
        d = super().clean()
        if d.get("mode") == "time" and not d.get("at"):
            self.add_error("at", "Give the time to reset to.")
        if d.get("mode") == "offset" and d.get("offset") is None:
            self.add_error("offset", "Give the offset to reset to.")
        return d


class GroupSettingsForm(forms.Form):
    """A consumer group's settings (``Broker.put_group``); empty attempts:
    the endpoint's default, which ``default`` names."""

    fifo = forms.BooleanField(
        required=False,
        label="FIFO",
        help_text="one message in flight per message group, in order",
    )
    max_delivery_attempts = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_ATTEMPTS,
        label="Max delivery attempts",
    )
    reason = ReasonField(label="Settings reason")

    def __init__(self, *args, default: int, **kwargs):
        super().__init__(*args, **kwargs)
        attempts = self.fields["max_delivery_attempts"]
        attempts.help_text = f"empty: the default ({default})"
        attempts.widget.attrs["placeholder"] = f"default ({default})"
        wrong = (
            f"Give a number of attempts from 1 to {MAX_ATTEMPTS}, "
            f"or leave it empty for the default ({default})."
        )
        for code in ("invalid", "min_value", "max_value"):
            attempts.error_messages[code] = wrong
