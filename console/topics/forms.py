from __future__ import annotations

from django import forms

from broker_core.metadata import MessageType
from console.ui.forms import LocalDateTimeField, ReasonField

PERM_CHOICES = [(6, "read + write"), (4, "read only"), (2, "write only"), (0, "none")]
TYPE_CHOICES = [(t.value, t.value) for t in MessageType]


class TopicForm(forms.Form):
    name = forms.CharField(max_length=127)
    read_queue_nums = forms.IntegerField(
        min_value=1, max_value=1024, initial=4, label="Read queues"
    )
    write_queue_nums = forms.IntegerField(
        min_value=1, max_value=1024, initial=4, label="Write queues"
    )
    perm = forms.TypedChoiceField(
        choices=PERM_CHOICES, coerce=int, initial=6, label="Permission"
    )
    message_type = forms.ChoiceField(choices=TYPE_CHOICES, initial="NORMAL")
    reason = forms.CharField(max_length=1000, required=False)

    def __init__(self, *args, editing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if editing:
            self.fields["name"].disabled = True


class DeleteTopicForm(forms.Form):
    confirm = forms.CharField(label="Type the topic name to confirm")
    reason = ReasonField()

    def __init__(self, *args, topic: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.topic = topic

    def clean_confirm(self):
        if self.cleaned_data["confirm"] != self.topic:
            raise forms.ValidationError("The name typed does not match the topic.")
        return self.cleaned_data["confirm"]


class SendMessageForm(forms.Form):
    body = forms.CharField(widget=forms.Textarea(attrs={"rows": 4}), strip=False)
    tags = forms.CharField(required=False, max_length=255)
    keys = forms.CharField(required=False, max_length=255, help_text="space separated")
    delay_level = forms.TypedChoiceField(
        required=False,
        coerce=int,
        empty_value=None,
        choices=[("", "deliver now")] + [(n, f"level {n}") for n in range(1, 19)],
        label="Delay",
    )
    deliver_at = LocalDateTimeField(
        required=False,
        label="Deliver at",
        help_text="a timer message: at most BROKER_MAX_DELAY_S ahead (3 days "
        "by default, RocketMQ's timerMaxDelaySec)",
    )
    properties = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="one name=value a line",
    )

    def clean(self) -> dict:
        d = super().clean()
        if d.get("delay_level") and d.get("deliver_at"):
            raise forms.ValidationError("Give a delay level or a delivery time.")
        return d

    def clean_properties(self) -> dict[str, str]:
        out = {}
        for line in self.cleaned_data["properties"].splitlines():
            if not line.strip():
                continue
            name, sep, value = line.partition("=")
            if not sep or not name.strip():
                raise forms.ValidationError(f"not name=value: {line!r}")
            out[name.strip()] = value.strip()
        return out
