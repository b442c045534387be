"""Sign-in everywhere: every page needs a signed-in user.

The API answers for itself (DRF's IsAuthenticated gives a JSON 401/403
instead of a redirect to the sign-in page), so /api/ is left to it; the
interactive docs are a page and redirect like one.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.middleware import LoginRequiredMiddleware
from django.http import HttpRequest


class ConsoleLoginRequiredMiddleware(LoginRequiredMiddleware):
    def process_view(
        self,
        request: HttpRequest,
        view_func: Any,
        view_args: Any,
        view_kwargs: Any,
    ) -> Any:
        if request.path.startswith("/api/") and not request.path.startswith(
            "/api/docs"
        ):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)


class RequestIdMiddleware:
    """Give each request an id (``X-Request-ID`` if sent) for logs and audit."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        import uuid

        sent = request.headers.get("X-Request-ID", "")
        request.request_id = sent[:64] if sent else uuid.uuid4().hex
        response = self.get_response(request)
        response["X-Request-ID"] = request.request_id
        return response


#: Session key of the user's time zone ("" for the console's default).
SESSION_TZ = "console_tz"


def user_time_zone(request: HttpRequest) -> str:
    """The signed-in user's chosen zone, cached in the session ("" if none)."""
    tz = request.session.get(SESSION_TZ)
    if tz is None:
        from console.accounts.models import Preference

        pref = Preference.objects.filter(user=request.user).first()
        tz = pref.time_zone if pref else ""
        request.session[SESSION_TZ] = tz
    return str(tz)


class UserTimeZoneMiddleware:
    """Show every time in the signed-in user's zone (``|when``, forms)."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        from django.utils import timezone

        tz = ""
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            tz = user_time_zone(request)
        try:
            if tz:
                timezone.activate(ZoneInfo(tz))
            else:
                timezone.deactivate()
        except (ZoneInfoNotFoundError, ValueError):
            timezone.deactivate()
        return self.get_response(request)
