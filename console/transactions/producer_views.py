"""Producer group pages: check-back settings and the latest check results."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from broker_core.errors import BrokerError
from console.core.forms import form_errors
from console.transactions import producers
from console.ui.permissions import admin_required, viewer_required


class CheckerForm(forms.Form):
    url = forms.URLField(label="Webhook URL", max_length=500, assume_scheme="https")
    secret = forms.CharField(
        widget=forms.PasswordInput(render_value=False),
        max_length=200,
        help_text="HMAC-SHA256 signing secret",
    )
    timeout_s = forms.FloatField(
        min_value=0.1, max_value=60, initial=5.0, label="Timeout (s)"
    )
    reason = forms.CharField(required=False, max_length=1000)


@viewer_required
def group_list(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "transactions/producer_list.html",
        {
            "groups": producers.producer_groups(),
            "clients": [
                c
                for c in producers.connected_clients()
                if c.get("client_type") == "PRODUCER"
            ],
        },
    )


@viewer_required
def group_detail(request: HttpRequest, group: str) -> HttpResponse:
    detail = producers.group_detail(group)
    form = CheckerForm(initial={"url": (detail["checker"] or {}).get("url", "")})
    return render(request, "transactions/producer.html", detail | {"form": form})


@require_POST
@admin_required
def configure(request: HttpRequest, group: str) -> HttpResponse:
    form = CheckerForm(request.POST)
    if not form.is_valid():
        messages.error(
            request,
            "Not saved: " + form_errors(form),
        )
        return redirect("producers:detail", group=group)
    d = form.cleaned_data
    try:
        producers.configure_checker(
            actor=request.user,
            request=request,
            group=group,
            url=d["url"],
            secret=d["secret"],
            timeout_s=d["timeout_s"],
            reason=d["reason"],
        )
    except (BrokerError, ValueError) as exc:
        messages.error(request, f"Not saved: {exc}")
    else:
        messages.success(request, f"Check-backs of {group} now go to {d['url']}.")
    return redirect("producers:detail", group=group)


@require_POST
@admin_required
def remove(request: HttpRequest, group: str) -> HttpResponse:
    producers.remove_checker(
        actor=request.user,
        request=request,
        group=group,
        reason=request.POST.get("reason", ""),
    )
    messages.success(request, f"Checker of {group} removed.")
    return redirect("producers:detail", group=group)
