"""API token authentication whose lock-outs key on the token, never the address.

DRF's throttles run after authentication and never see a guessed token, so this
class deals with bad tokens itself. The presented token is looked up first: a
valid token of an active user is accepted whatever else its address has sent,
so one client (or every client behind a shared proxy) cannot lock another out.
A bad token is then answered, in this order:

* 429 ``locked_out`` when its fingerprint (an HMAC of the token under the
  secret key; the token itself is never stored) has failed
  ``LOGIN_FAILURE_LIMIT`` times within ``LOGIN_COOLOFF_MINUTES``, from any
  address. django-axes counts the failures as failed logins of the pseudo-user
  ``"(api token) <fingerprint>"``; the lock is audited as
  ``api_token.locked_out`` and lifted early with ``axes_reset_username``;
* 429 ``bad_token_rate`` when its client address
  (``console.core.client_address``) sent more than ``API_BAD_TOKEN_RATE`` bad
  tokens: a rate limit on guessing that never refuses a valid token;
* 401 otherwise, and counted toward both.

A password lock-out of a user does not refuse that user's tokens: a token is a
credential of its own, and a lock on it would let anyone who knows a user name
cut off that user's automation. A deactivated user's token is refused (401).
"""

from __future__ import annotations

from typing import Any

from axes.handlers.proxy import AxesProxyHandler
from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils.crypto import salted_hmac
from rest_framework.authentication import (
    TokenAuthentication,
    get_authorization_header,
)
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.throttling import SimpleRateThrottle

from console.core.client_address import client_ip

#: The prefix of the user names bad API tokens are counted under. Real user
#: names cannot hold spaces or parentheses, so no account is ever one of them.
API_TOKEN_USER = "(api token)"
_FINGERPRINT_SALT = "console.core.authentication.token_fingerprint"
_LOGIN_LOCKED = "Too many failed sign-ins from this address"


def cooloff_seconds() -> int:
    return int(settings.AXES_COOLOFF_TIME * 3600)


def token_fingerprint(presented: bytes) -> str:
    """Return the fingerprint a presented token's failures are counted under.

    Keyed with the secret key, so a stored fingerprint does not reveal even a
    short, guessable value someone pasted as a token."""
    digest = salted_hmac(_FINGERPRINT_SALT, presented, algorithm="sha256")
    return digest.hexdigest()[:20]


def token_credentials(presented: bytes) -> dict[str, str]:
    """Return the credentials django-axes counts a bad token's failures under."""
    return {"username": f"{API_TOKEN_USER} {token_fingerprint(presented)}"}


def is_token_user(username: str | None) -> bool:
    """Return True for the pseudo-user names of bad API tokens."""
    return bool(username) and str(username).startswith(API_TOKEN_USER)


def lockout_parameters(
    request_or_attempt: Any, credentials: dict[str, Any] | None = None
) -> list[list[str]]:
    """django-axes' lock-out key: a bad token's fingerprint alone (its failures
    from every address add up, and nothing else is locked); a user name with
    the client's address for passwords."""
    username = (credentials or {}).get("username") or getattr(
        request_or_attempt, "username", None
    )
    if is_token_user(username):
        return [["username"]]
    return [["username", "ip_address"]]


def _token_locked_message() -> str:
    minutes = max(1, cooloff_seconds() // 60)
    return (
        f"This API token was refused {settings.AXES_FAILURE_LIMIT} times and is "
        f"locked for {minutes} min; other tokens are not affected."
    )


class LockedOut(Throttled):
    default_code = "locked_out"


class BadTokenRate(Throttled):
    default_code = "bad_token_rate"
    default_detail = (
        "Too many bad API tokens from this address; a valid token is still accepted."
    )


class BadTokenRateThrottle(SimpleRateThrottle):
    """``API_BAD_TOKEN_RATE`` bad tokens per client address (per console
    process, in Django's cache, like DRF's own throttles)."""

    scope = "bad_token"

    def get_rate(self) -> str:
        return settings.API_BAD_TOKEN_RATE

    def get_cache_key(self, request: Any, view: Any) -> str:
        # Not DRF's get_ident(): that trusts any X-Forwarded-For a client sends.
        ident = client_ip(request) or "unknown"
        return self.cache_format % {"scope": self.scope, "ident": ident}


def lockout_response(
    request: Any, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """django-axes' answer to a lock-out: JSON for the API, the sign-in page's
    frame for people; 429 with ``Retry-After`` either way."""
    wait = cooloff_seconds()
    minutes = max(1, wait // 60)
    response: HttpResponse
    if is_token_user((credentials or {}).get("username")):
        message = _token_locked_message()
        response = JsonResponse({"code": "locked_out", "message": message}, status=429)
    elif request.path.startswith("/api/"):
        message = f"{_LOGIN_LOCKED}; try again in {minutes} min."
        response = JsonResponse({"code": "locked_out", "message": message}, status=429)
    else:
        response = render(
            request, "registration/locked_out.html", {"minutes": minutes}, status=429
        )
    response["Retry-After"] = str(wait)
    return response


class LockoutTokenAuthentication(TokenAuthentication):
    """DRF's token authentication with the lock-outs described above."""

    def authenticate(self, request: Any) -> Any:
        auth = get_authorization_header(request).split()
        if not auth or auth[0].lower() != self.keyword.lower().encode():
            return None  # no token: the next class (session) decides
        try:
            return super().authenticate(request)
        except AuthenticationFailed:
            self._refuse_bad_token(request, b" ".join(auth[1:]))
            raise

    def _refuse_bad_token(self, request: Any, presented: bytes) -> None:
        """Raise 429 if this bad token or its address is over its limit, else
        count it (the failure that reaches the limit is answered 429 too)."""
        raw = request._request
        credentials = token_credentials(presented)
        if not AxesProxyHandler.is_allowed(raw, credentials):
            raise LockedOut(wait=cooloff_seconds(), detail=_token_locked_message())
        throttle = BadTokenRateThrottle()
        if not throttle.allow_request(request, None):
            raise BadTokenRate(wait=throttle.wait())
        user_login_failed.send(sender=type(self), credentials=credentials, request=raw)
        if getattr(raw, "axes_locked_out", False):
            raise LockedOut(wait=cooloff_seconds(), detail=_token_locked_message())
