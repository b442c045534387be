"""API token authentication with the login lock-out (django-axes).

DRF's throttles run after authentication, so they never see a guessed token:
this class counts each bad token as a failed login of the pseudo-user
``API_TOKEN_USER`` from the client's address. After ``LOGIN_FAILURE_LIMIT``
failures that address gets 429 (with ``Retry-After``) for
``LOGIN_COOLOFF_MINUTES``, whatever token it sends; the lock-out is audited as
``api_token.locked_out``.
"""

from __future__ import annotations

from typing import Any

from axes.handlers.proxy import AxesProxyHandler
from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from rest_framework.authentication import (
    TokenAuthentication,
    get_authorization_header,
)
from rest_framework.exceptions import AuthenticationFailed, Throttled

#: The user name bad API tokens are counted under (never a real account).
API_TOKEN_USER = "(api token)"
_CREDENTIALS = {"username": API_TOKEN_USER}
_LOCKED = "Too many failed sign-ins or bad API tokens from this address"


def cooloff_seconds() -> int:
    return int(settings.AXES_COOLOFF_TIME * 3600)


class LockedOut(Throttled):
    default_code = "locked_out"


def lockout_response(
    request: Any, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """django-axes' answer to a locked-out address: JSON for the API, the
    sign-in page's frame for people; 429 with ``Retry-After`` either way."""
    wait = cooloff_seconds()
    minutes = max(1, wait // 60)
    response: HttpResponse
    if request.path.startswith("/api/"):
        message = f"{_LOCKED}; try again in {minutes} min."
        response = JsonResponse({"code": "locked_out", "message": message}, status=429)
    else:
        response = render(
            request, "registration/locked_out.html", {"minutes": minutes}, status=429
        )
    response["Retry-After"] = str(wait)
    return response


class LockoutTokenAuthentication(TokenAuthentication):
    def authenticate(self, request: Any) -> Any:
        auth = get_authorization_header(request).split()
        if not auth or auth[0].lower() != self.keyword.lower().encode():
            return None  # no token: the next class (session) decides
        raw = request._request
        if not AxesProxyHandler.is_allowed(raw, _CREDENTIALS):
            raise LockedOut(wait=cooloff_seconds(), detail=f"{_LOCKED}; try later.")
        try:
            return super().authenticate(request)
        except AuthenticationFailed:
            user_login_failed.send(
                sender=type(self), credentials=_CREDENTIALS, request=raw
            )
            raise
