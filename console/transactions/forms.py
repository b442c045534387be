"""Forms of the transaction pages: the list filters and the actions' reasons."""

from __future__ import annotations

from typing import Any

from django import forms

from console.transactions.services import SORTS
from console.ui.forms import ReasonField

COMMIT_WORD = "COMMIT"


class ReasonForm(forms.Form):
    reason = ReasonField()


class OptionalReasonForm(forms.Form):
    reason = forms.CharField(required=False, max_length=1000)


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


STATE_CHOICES = [
    ("PENDING", "pending"),
    ("DISCARDED", "discarded"),
    ("COMMITTED", "committed"),
    ("ROLLED_BACK", "rolled back"),
    ("ALL", "all"),
]


class HalfFilterForm(forms.Form):
    """The list filters, validated; ``list_kwargs()`` gives ``list_halves`` arguments.

    Halves live in broker_core's pending-transaction index (SQLite, derived
    from the log), not in Django's database, so this is a form, not a
    django-filter FilterSet over a queryset; the page and
    ``GET /api/transactions/`` share it."""

    producer_group = forms.CharField(
        required=False, max_length=255, label="Producer group"
    )
    topic = forms.CharField(required=False, max_length=255)
    key = forms.CharField(required=False, max_length=255)
    min_age_minutes = forms.FloatField(
        # At most ten years: a larger age overflows the millisecond clock.
        required=False,
        min_value=0,
        max_value=5_256_000,
        label="Older than (min)",
    )
    min_checks = forms.IntegerField(required=False, min_value=0, label="Checks ≥")
    state = forms.ChoiceField(required=False, choices=STATE_CHOICES, initial="PENDING")
    sort = forms.ChoiceField(
        required=False, choices=[(s, s) for s in SORTS], widget=forms.HiddenInput
    )

    def __init__(
        self, data: Any = None, *, default_state: str = "PENDING", **kwargs: Any
    ):
        super().__init__(data, **kwargs)
        self.default_state = default_state

    def error_text(self) -> str:
        """The form's errors in one line: ``state: Select a valid choice...``."""
        return "; ".join(
            f"{self.fields[k].label or k if k in self.fields else k}: {' '.join(v)}"
            for k, v in self.errors.items()
        )

    def list_kwargs(self) -> dict[str, Any]:
        """Arguments for ``services.list_transactions``: the defaults for an
        unbound form (no filter given); ``ValueError`` for a bound form that
        is invalid (a filter silently dropped once made "every half matching
        the filter" every pending half)."""
        if not self.is_bound:
            d: dict[str, Any] = {}
        elif self.is_valid():
            d = self.cleaned_data
        else:
            raise ValueError(self.error_text())
        state = d.get("state") or self.default_state
        minutes = d.get("min_age_minutes")
        return {
            "state": None if state == "ALL" else state,
            "producer_group": (d.get("producer_group") or "").strip(),
            "topic": (d.get("topic") or "").strip(),
            "key": (d.get("key") or "").strip(),
            "min_age_s": minutes * 60 if minutes is not None else None,
            "min_checks": d.get("min_checks"),
            "sort": d.get("sort") or "born",
        }
