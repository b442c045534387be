"""Lock-outs and client addresses behind a real reverse proxy: Debian's nginx.

nginx listens on a free 127.0.0.1 port and forwards to the console's live
server with ``proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;``,
so the console sees every request from nginx (REMOTE_ADDR 127.0.0.1) and the
client only in the entry nginx appended. Two client machines are two source
addresses on loopback, 127.0.0.2 and 127.0.0.3 (each request binds its socket
to its own). With ``TRUSTED_PROXY_HEADER`` set, the tests show:

* 50 bad tokens from one client never lock out a valid token from that same
  address (nor the other client's), and a repeated bad token is locked by the
  token, from every address;
* the bad-token rate, the sign-in lock-out and audit records key on the real
  client address, not nginx's, and an ``X-Forwarded-For`` a client writes
  itself (sitting left of nginx's entry) changes nothing.

Without the setting, every client has nginx's address (the last test): that is
what a console left unconfigured behind a proxy does, and what each assertion
above would see if the header were not read.
"""

from __future__ import annotations

import contextlib
import grp
import http.client
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import pytest

from tests.console.conftest import PASSWORD
from tests.support import free_port

pytestmark = pytest.mark.services

API = "/api/audit/"
NGINX = "127.0.0.1"  # the proxy's address: REMOTE_ADDR of every request
CLIENT_A = "127.0.0.2"
CLIENT_B = "127.0.0.3"


def _nginx_binary() -> str | None:
    # /usr/sbin is not on an ordinary user's PATH on Debian.
    found = shutil.which("nginx")
    if found is None and os.access("/usr/sbin/nginx", os.X_OK):
        found = "/usr/sbin/nginx"
    return found


def _nginx_conf(tmp: Path, binary: str, port: int, upstream: str) -> str:
    """A self-contained configuration: everything nginx writes is under ``tmp``."""
    built = subprocess.run(
        [binary, "-V"], capture_output=True, text=True, timeout=10
    ).stderr
    temp_paths = [f"client_body_temp_path {tmp}/client_body;"]
    for module in ("proxy", "fastcgi", "uwsgi", "scgi"):
        if f"--without-http_{module}_module" not in built:
            temp_paths.append(f"{module}_temp_path {tmp}/{module};")
    # As root, nginx would run its workers as nobody, who cannot enter tmp.
    user = ""
    if os.geteuid() == 0:
        user = (
            f"user {pwd.getpwuid(os.geteuid()).pw_name} "
            f"{grp.getgrgid(os.getegid()).gr_name};"
        )
    temp = "\n    ".join(temp_paths)
    return f"""
{user}
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
events {{ worker_connections 64; }}
http {{
    access_log {tmp}/access.log;
    {temp}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://{upstream};
            proxy_http_version 1.1;
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }}
    }}
}}
"""


@pytest.fixture(scope="module")
def nginx(live_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """nginx in front of the live server; yields the port it listens on and
    stops it at the end whatever happens."""
    binary = _nginx_binary()
    if binary is None:
        pytest.skip("no nginx (Debian's nginx-light; make setup installs it)")
    tmp = tmp_path_factory.mktemp("nginx")
    upstream = urllib.parse.urlsplit(live_server.url)
    port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(_nginx_conf(tmp, binary, port, f"127.0.0.1:{upstream.port}"))
    log = open(tmp / "stderr.log", "wb")
    proc = subprocess.Popen(
        [binary, "-p", str(tmp), "-e", str(tmp / "error.log"),
         "-c", str(conf), "-g", "daemon off;"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 15
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"nginx exited {proc.returncode}: {_logs(tmp)}")
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"nginx does not answer on {port}: {_logs(tmp)}")
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _logs(tmp: Path) -> str:
    return " | ".join(
        p.read_text(errors="replace")[-2000:]
        for p in (tmp / "stderr.log", tmp / "error.log")
        if p.exists()
    )


class Machine:
    """A client at one loopback address, talking to nginx, with its cookies."""

    def __init__(self, port: int, address: str) -> None:
        self.port = port
        self.address = address
        self.cookies: dict[str, str] = {}

    def request(
        self,
        method: str,
        path: str,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        conn = http.client.HTTPConnection(
            "127.0.0.1", self.port, timeout=15, source_address=(self.address, 0)
        )
        try:
            sent = dict(headers or {})
            if self.cookies:
                sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
            conn.request(method, path, body=body, headers=sent)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        for line in response.headers.get_all("Set-Cookie") or []:
            for name, morsel in SimpleCookie(line).items():
                self.cookies[name] = morsel.value
        return response.status, response.headers, data

    def api(self, token: str, forged: str | None = None) -> tuple[int, dict[str, Any]]:
        """GET the API with ``Authorization: Token <token>``; ``forged`` is an
        X-Forwarded-For the client writes itself (nginx appends to it)."""
        headers = {"Authorization": f"Token {token}"}
        if forged:
            headers["X-Forwarded-For"] = forged
        status, _, data = self.request("GET", API, headers)
        return status, json.loads(data)

    def sign_in(
        self, username: str, password: str, forged: str | None = None
    ) -> tuple[int, http.client.HTTPMessage]:
        status, _, page = self.request("GET", "/login/")
        assert status == 200, status
        match = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert match, page[:500]
        form = urllib.parse.urlencode(
            {
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": match.group(1).decode(),
                "next": "/",
            }
        ).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if forged:
            headers["X-Forwarded-For"] = forged
        status, response_headers, _ = self.request("POST", "/login/", headers, form)
        return status, response_headers


@pytest.fixture(autouse=True)
def _limits(settings: Any) -> Iterator[None]:
    """The documented limits and empty rate counters (the live server runs in
    this process: it sees these settings and this cache)."""
    from django.core.cache import cache

    settings.AXES_FAILURE_LIMIT = 5
    settings.AXES_COOLOFF_TIME = 15 / 60
    settings.API_BAD_TOKEN_RATE = "30/min"
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    cache.clear()
    yield
    cache.clear()


#: Both documented ways to trust nginx's entry: by count (the entry one proxy
#: appended) and by the proxy's address (docs/console.md's nginx example).
TRUSTED = {
    "count": {
        "TRUSTED_PROXY_HEADER": "X-Forwarded-For",
        "TRUSTED_PROXY_COUNT": 1,
        "TRUSTED_PROXIES": [],
    },
    "proxies": {
        "TRUSTED_PROXY_HEADER": "HTTP_X_FORWARDED_FOR",
        "TRUSTED_PROXY_COUNT": 1,
        "TRUSTED_PROXIES": [NGINX],
    },
}


@pytest.fixture(params=sorted(TRUSTED))
def behind_nginx(request: Any, settings: Any, nginx: int) -> tuple[Machine, Machine]:
    """The console configured for nginx; two client machines, A and B."""
    for name, value in TRUSTED[request.param].items():
        setattr(settings, name, value)
    return Machine(nginx, CLIENT_A), Machine(nginx, CLIENT_B)


@pytest.fixture
def admin_token(users: dict[str, Any]) -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.create(user=users["admin"]).key


def _counted_addresses() -> set[str]:
    from axes.models import AccessAttempt

    return set(AccessAttempt.objects.values_list("ip_address", flat=True))


def test_fifty_bad_tokens_through_nginx_never_lock_out_a_valid_token(
    behind_nginx: tuple[Machine, Machine], admin_token: str
) -> None:
    """A sends 50 different bad tokens, each with a different X-Forwarded-For
    of its own: the first 30 are 401, the rest 429 (A's bad-token rate: the
    forged entries do not dodge it), and the admin's valid token from A is
    accepted throughout and after. B, behind the same nginx, has a rate of its
    own: its typo is a plain 401. Failures are counted under A's and B's
    addresses, never nginx's or a forged one."""
    a, b = behind_nginx
    codes = []
    for i in range(50):
        status, _ = a.api(f"guess-{i:02d}", forged=f"10.9.0.{i}")
        codes.append(status)
        if i % 10 == 9:
            assert a.api(admin_token)[0] == 200, i
    assert codes == [401] * 30 + [429] * 20
    status, body = a.api("guess-50")
    assert (status, body["code"]) == (429, "bad_token_rate")
    status, body = a.api(admin_token, forged="10.9.0.99")
    assert status == 200 and "results" in body

    assert b.api("b-typo")[0] == 401
    assert b.api(admin_token)[0] == 200
    assert _counted_addresses() == {CLIENT_A, CLIENT_B}


def test_a_repeated_bad_token_is_locked_by_the_token_and_audited_with_its_sender(
    behind_nginx: tuple[Machine, Machine], admin_token: str
) -> None:
    """The same bad token five times from A: locked (429 ``locked_out``), from
    B as well: the lock is the token's, not an address's. Valid tokens from A
    and B, and A's other bad tokens, are unaffected. The audit record of the
    lock names A's address, not nginx's nor the one A forged."""
    from console.audit.models import AuditRecord

    a, b = behind_nginx
    revoked = "0123456789abcdef0123456789abcdef01234567"
    codes = [a.api(revoked, forged=CLIENT_B)[0] for _ in range(5)]
    assert codes == [401, 401, 401, 401, 429]
    status, body = b.api(revoked)
    assert (status, body["code"]) == (429, "locked_out")
    assert a.api(admin_token)[0] == 200
    assert b.api(admin_token)[0] == 200
    assert a.api("another-bad-token")[0] == 401

    (record,) = AuditRecord.objects.filter(action="api_token.locked_out")
    assert record.ip == CLIENT_A
    assert _counted_addresses() == {CLIENT_A}


def test_sign_in_lock_out_behind_nginx_is_per_client_address(
    behind_nginx: tuple[Machine, Machine], users: dict[str, Any]
) -> None:
    """Five wrong passwords for admin from A, who writes B's address into its
    own X-Forwarded-For: A is locked out (429 even with the right password),
    B signs in as admin from behind the same nginx. The lock-out's audit
    records (one per refused attempt) and the counted failures carry A's
    address."""
    from console.audit.models import AuditRecord

    a, b = behind_nginx
    codes = [a.sign_in("admin", "wrong", forged=CLIENT_B)[0] for _ in range(4)]
    assert codes == [200] * 4  # the form again, with an error
    a.sign_in("admin", "wrong", forged=CLIENT_B)  # the fifth locks
    status, headers = a.sign_in("admin", PASSWORD)
    assert status == 429 and int(headers["Retry-After"]) == 15 * 60

    status, headers = b.sign_in("admin", PASSWORD)
    assert status == 302 and headers["Location"] == "/"

    locks = AuditRecord.objects.filter(action="login.locked_out")
    assert {(r.object_id, r.ip) for r in locks} == {("admin", CLIENT_A)}
    assert _counted_addresses() == {CLIENT_A}


def test_without_the_trusted_header_every_client_is_nginx(
    settings: Any, nginx: int, admin_token: str
) -> None:
    """The control: with TRUSTED_PROXY_HEADER unset, the console sees only
    nginx's address, so A's 30 bad tokens use up B's rate too (valid tokens
    still work, as docs/console.md says), and every failure is counted under
    nginx's address. This is what the tests above would see if the console
    did not read nginx's entry: the requests really do pass through nginx."""
    settings.TRUSTED_PROXY_HEADER = ""
    a, b = Machine(nginx, CLIENT_A), Machine(nginx, CLIENT_B)
    codes = [a.api(f"guess-{i:02d}")[0] for i in range(30)]
    assert codes == [401] * 30
    assert b.api("b-typo")[0] == 429
    assert b.api(admin_token)[0] == 200
    assert a.api(admin_token)[0] == 200
    assert _counted_addresses() == {NGINX}
