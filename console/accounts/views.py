"""Users page (admin): list users with their role, add a user, change a role."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from console.accounts import services
from console.accounts.forms import NewUserForm, RoleForm
from console.ui.middleware import SESSION_TZ, user_time_zone
from console.ui.pagination import paginate
from console.ui.permissions import admin_required, viewer_required
from console.ui.roles import user_role


@admin_required
def user_list(request: HttpRequest) -> HttpResponse:
    form = NewUserForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        try:
            services.create_user(
                d["username"],
                d["role"],
                d["password"],
                actor=request.user,
                request=request,
            )
        except (ValueError, ValidationError) as exc:
            form.add_error(None, "; ".join(getattr(exc, "messages", [str(exc)])))
        else:
            messages.success(request, f"User {d['username']} added as {d['role']}.")
            return redirect("accounts:list")
    users = get_user_model().objects.order_by("username").prefetch_related("groups")
    page = paginate(request, users)
    rows = [(u, user_role(u)) for u in page]
    return render(
        request,
        "accounts/user_list.html",
        {"page": page, "rows": rows, "form": form, "role_form": RoleForm()},
    )


@require_POST
@admin_required
def change_role(request: HttpRequest, pk: int) -> HttpResponse:
    user = get_object_or_404(get_user_model(), pk=pk)
    form = RoleForm(request.POST)
    if form.is_valid():
        if user == request.user:
            messages.error(request, "You cannot change your own role.")
        else:
            services.change_role(
                user, form.cleaned_data["role"], actor=request.user, request=request
            )
            messages.success(
                request, f"{user.username} is now {form.cleaned_data['role']}."
            )
    return redirect("accounts:list")


def available_zones() -> list[str]:
    from zoneinfo import available_timezones

    return sorted(available_timezones())


@viewer_required
def my_account(request: HttpRequest) -> HttpResponse:
    """Your role and your API token (``Authorization: Token <key>``)."""
    from rest_framework.authtoken.models import Token

    new_key = None
    if request.method == "POST" and "time_zone" in request.POST:
        zone = request.POST["time_zone"]
        if zone and zone not in available_zones():
            messages.error(request, f"Unknown time zone {zone!r}.")
        else:
            services.set_time_zone(request.user, zone)
            request.session[SESSION_TZ] = zone
            messages.success(
                request, f"Times now show in {zone or 'the default zone'}."
            )
        return redirect("account:me")
    if request.method == "POST":
        new_key = services.rotate_token(actor=request.user, request=request)
        messages.success(
            request, "New API token created. Copy it now: it is shown once."
        )
    token = Token.objects.filter(user=request.user).first()
    return render(
        request,
        "accounts/account.html",
        {
            "new_key": new_key,
            "token_prefix": token.key[:6] if token else None,
            "token_created": token.created if token else None,
            "zones": available_zones(),
            "my_zone": user_time_zone(request),
            "default_zone": settings.TIME_ZONE,
        },
    )
