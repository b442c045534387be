"""Server-side role checks for pages (decorator, mixin) and the API (DRF)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from rest_framework.permissions import BasePermission

from console.ui.roles import ADMIN, OPERATOR, VIEWER, has_role


def _check(request: HttpRequest, role: str) -> HttpResponse | None:
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if not has_role(request.user, role):
        raise PermissionDenied(f"This needs the {role} role.")
    return None


def role_required(
    role: str,
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Decorate a view so that only users with ``role`` (or higher) reach it."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            denied = _check(request, role)
            if denied is not None:
                return denied
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


viewer_required = role_required(VIEWER)
operator_required = role_required(OPERATOR)
admin_required = role_required(ADMIN)


class HasRole(BasePermission):
    """DRF permission: reads need ``read_role``, writes need ``write_role``.

    A view may set ``read_role`` / ``write_role``; ``action_roles`` maps a
    viewset action name to the role it needs.
    """

    message = "Your role does not allow this."

    def has_permission(self, request: Any, view: Any) -> bool:
        user = request.user
        if not user or not user.is_authenticated:
            return False
        action = getattr(view, "action", None)
        roles = getattr(view, "action_roles", {}) or {}
        if action in roles:
            role = roles[action]
        elif request.method in ("GET", "HEAD", "OPTIONS"):
            role = getattr(view, "read_role", VIEWER)
        else:
            role = getattr(view, "write_role", ADMIN)
        return has_role(user, role)
