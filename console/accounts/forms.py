from __future__ import annotations

from django import forms

from console.ui.roles import ROLES

ROLE_CHOICES = [(r, r) for r in ROLES]


class NewUserForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=ROLE_CHOICES)
    password = forms.CharField(widget=forms.PasswordInput, min_length=8)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=ROLE_CHOICES)
