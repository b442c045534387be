from django import forms

from console.ui.forms import ReasonField


class CancelForm(forms.Form):
    reason = ReasonField()
