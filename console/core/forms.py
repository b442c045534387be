"""What the console's HTML forms share."""

from __future__ import annotations

from django import forms
from django.forms.utils import ErrorDict

NON_FIELD = "__all__"


def form_errors(form: forms.BaseForm) -> str:
    """A refused form's errors in one line for a flash message: each field by
    its label ("Delivery attempts: ..."), the form's own errors bare."""
    errors: ErrorDict = form.errors
    parts = []
    for name, messages in errors.items():
        text = " ".join(messages)
        if name == NON_FIELD:
            parts.append(text)
        else:
            field = form.fields.get(name)
            label = field.label if field is not None and field.label else name
            parts.append(f"{label}: {text}")
    return "; ".join(parts)
