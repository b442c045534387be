from __future__ import annotations

from django import forms

from console.ui.forms import ReasonField

COMMIT_WORD = "COMMIT"


class ReasonForm(forms.Form):
    reason = ReasonField()


class CommitForm(forms.Form):
    confirm = forms.CharField(label=f"Type {COMMIT_WORD} to confirm", max_length=16)
    reason = ReasonField()

    def clean_confirm(self) -> str:
        if self.cleaned_data["confirm"].strip() != COMMIT_WORD:
            raise forms.ValidationError(f"Type {COMMIT_WORD} in capitals to commit.")
        return COMMIT_WORD


class BulkRollbackForm(forms.Form):
    ids = forms.CharField(required=False, widget=forms.MultipleHiddenInput)
    all_matching = forms.BooleanField(required=False)
    reason = ReasonField()
