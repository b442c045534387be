"""API token lock-outs (console/core/authentication.py) over real requests.

Issue #27: five bad tokens from one address used to lock every token from it
out, the admin's valid one included, and behind a reverse proxy every user.
Bad tokens are now locked out per token fingerprint and only rate limited per
address; a valid token always works."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

URL = "/api/audit/"
PROXY = "127.0.0.1"  # REMOTE_ADDR of every request that came through the proxy
CLIENT_A = "203.0.113.7"
CLIENT_B = "198.51.100.23"


@pytest.fixture(autouse=True)
def _limits(settings: Any) -> Iterator[None]:
    """The documented defaults, whatever the environment says, and empty rate
    counters (kept in the process's cache) before and after each test."""
    from django.core.cache import cache

    settings.AXES_FAILURE_LIMIT = 5
    settings.AXES_COOLOFF_TIME = 15 / 60
    settings.API_BAD_TOKEN_RATE = "30/min"
    settings.TRUSTED_PROXY_HEADER = ""
    settings.TRUSTED_PROXIES = []
    settings.TRUSTED_PROXY_COUNT = 1
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def admin_token(users: dict[str, Any]) -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.create(user=users["admin"]).key


def _get(client: Any, token: str, **extra: Any) -> Any:
    return client.get(URL, HTTP_AUTHORIZATION=f"Token {token}", **extra)


def test_fifty_bad_tokens_never_lock_out_a_valid_token_from_the_same_address(
    client: Any, admin_token: str
) -> None:
    """50 different bad tokens from one address: the first 30 are 401, the rest
    429 (the address's bad-token rate), and the admin's valid token from that
    same address is accepted throughout and after."""
    codes = []
    for i in range(50):
        r = _get(client, f"guess-{i:02d}")
        codes.append(r.status_code)
        if i % 10 == 9:
            assert _get(client, admin_token).status_code == 200, i
    assert codes == [401] * 30 + [429] * 20
    limited = _get(client, "guess-50")
    assert limited.status_code == 429
    assert limited.json()["code"] == "bad_token_rate"
    assert "a valid token is still accepted" in limited.json()["message"]
    assert 0 < int(limited["Retry-After"]) <= 60
    ok = _get(client, admin_token)
    assert ok.status_code == 200 and "results" in ok.json()


def test_a_repeated_bad_token_is_locked_out_by_its_fingerprint(
    client: Any, users: dict[str, Any], admin_token: str
) -> None:
    """The same bad token five times: 401 four times, then 429 ``locked_out``
    for the cool-off, from any address. Other tokens from that address are
    untouched: a fresh bad one is 401, a valid one 200. The lock is audited
    under the token's fingerprint; the token itself is stored nowhere."""
    from axes.models import AccessAttempt
    from django.core.management import call_command

    from console.audit.models import AuditRecord
    from console.core.authentication import API_TOKEN_USER, token_fingerprint

    revoked = "0123456789abcdef0123456789abcdef01234567"
    codes = [_get(client, revoked).status_code for _ in range(5)]
    assert codes == [401, 401, 401, 401, 429]
    locked = _get(client, revoked)
    assert locked.status_code == 429
    assert locked.json()["code"] == "locked_out"
    assert "locked for 15 min" in locked.json()["message"]
    assert int(locked["Retry-After"]) == 15 * 60
    elsewhere = _get(client, revoked, REMOTE_ADDR="10.0.0.9")
    assert elsewhere.status_code == 429  # keyed on the token, not the address

    assert _get(client, "another-bad-token").status_code == 401
    assert _get(client, admin_token).status_code == 200

    fingerprint = token_fingerprint(revoked.encode())
    (record,) = AuditRecord.objects.filter(action="api_token.locked_out")
    assert (record.object_id, record.status, record.ip) == (
        fingerprint,
        "denied",
        "127.0.0.1",
    )
    stored = [
        json.dumps(list(AccessAttempt.objects.values()), default=str),
        json.dumps(list(AuditRecord.objects.values()), default=str),
    ]
    assert not any(revoked in text for text in stored)

    # An admin lifts it early, as docs/console.md says.
    call_command("axes_reset_username", f"{API_TOKEN_USER} {fingerprint}")
    assert _get(client, revoked).status_code == 401


def test_behind_a_proxy_one_clients_bad_tokens_leave_other_clients_alone(
    client: Any, settings: Any, admin_token: str
) -> None:
    """With the proxy's header trusted, 50 bad tokens from client A (who also
    rotates the part of X-Forwarded-For it writes itself) rate-limit A only:
    client B's valid token is accepted and B's own typo is a plain 401."""
    from axes.models import AccessAttempt

    settings.TRUSTED_PROXY_HEADER = "HTTP_X_FORWARDED_FOR"
    settings.TRUSTED_PROXY_COUNT = 1

    def via_proxy(client_ip: str, spoofed: str | None = None) -> dict[str, str]:
        forwarded = f"{spoofed}, {client_ip}" if spoofed else client_ip
        return {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": forwarded}

    codes = [
        _get(client, f"a-guess-{i}", **via_proxy(CLIENT_A, f"10.1.0.{i}")).status_code
        for i in range(50)
    ]
    assert codes == [401] * 30 + [429] * 20
    assert _get(client, admin_token, **via_proxy(CLIENT_B)).status_code == 200
    assert _get(client, "b-typo", **via_proxy(CLIENT_B)).status_code == 401
    # A's own valid token still works too.
    assert _get(client, admin_token, **via_proxy(CLIENT_A)).status_code == 200
    counted = set(AccessAttempt.objects.values_list("ip_address", flat=True))
    assert counted == {CLIENT_A, CLIENT_B}


def test_a_proxy_header_is_ignored_unless_configured(
    client: Any, admin_token: str
) -> None:
    """Without TRUSTED_PROXY_HEADER a client cannot dodge the address's rate by
    writing its own X-Forwarded-For."""
    codes = [
        _get(client, f"g{i}", HTTP_X_FORWARDED_FOR=f"10.2.0.{i}").status_code
        for i in range(31)
    ]
    assert codes == [401] * 30 + [429]
    valid = _get(client, admin_token, HTTP_X_FORWARDED_FOR="10.2.0.99")
    assert valid.status_code == 200


def test_a_password_lock_out_does_not_refuse_the_users_tokens(
    client: Any, users: dict[str, Any], admin_token: str
) -> None:
    """Five wrong passwords lock the admin's sign-in from this address (429),
    but not its API token; a deactivated user's token is refused."""
    for _ in range(5):
        client.post("/login/", {"username": "admin", "password": "wrong"})
    locked = client.post(
        "/login/", {"username": "admin", "password": "correct-horse-battery-staple"}
    )
    assert locked.status_code == 429
    assert _get(client, admin_token).status_code == 200
    users["admin"].is_active = False
    users["admin"].save()
    refused = _get(client, admin_token)
    assert refused.status_code == 401 and refused["WWW-Authenticate"] == "Token"


def test_over_http_bad_tokens_from_one_client_behind_the_proxy_spare_another(
    live_server: Any, settings: Any, admin_token: str
) -> None:
    """The same over real HTTP, with the proxy named by address
    (TRUSTED_PROXIES): the live server sees every request from 127.0.0.1, the
    proxy, which tells it the client in X-Forwarded-For."""
    settings.TRUSTED_PROXY_HEADER = "X-Forwarded-For"
    settings.TRUSTED_PROXIES = ["127.0.0.1"]

    def call(token: str, forwarded_for: str) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(
            live_server.url + URL,
            headers={
                "Authorization": f"Token {token}",
                "X-Forwarded-For": forwarded_for,
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)

    answers = [call(f"a-guess-{i}", CLIENT_A) for i in range(50)]
    assert [code for code, _ in answers] == [401] * 30 + [429] * 20
    assert answers[-1][1]["code"] == "bad_token_rate"
    status, body = call(admin_token, CLIENT_B)
    assert status == 200 and "results" in body
    assert call("b-typo", CLIENT_B)[0] == 401
