"""Fixtures for console tests: a private broker store, users per role, clients,
and a real headless Chromium (Playwright) for the tests marked ``browser``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
PASSWORD = "correct-horse-battery-staple"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SMALL_STORE = {
    "segment_size": 1 << 20,
    "cq_units_per_file": 1024,
    "index_slots": 4096,
    "index_entries": 32768,
    "flush_interval_ms": 50,
}


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    django_db_modify_db_settings_parallel_suffix: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Test on an SQLite file, as production does, not shared-cache memory.

    In-memory shared-cache SQLite takes table locks that ignore the busy
    timeout: two requests writing at once (two operators on one half) fail with
    "database table is locked" there, never on the WAL file the console uses.
    """
    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["ENGINE"] == "django.db.backends.sqlite3":
        db.setdefault("TEST", {})["NAME"] = str(
            tmp_path_factory.mktemp("db") / "test.sqlite3"
        )


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    """Test users need no slow key stretching."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


#: ``CONSOLE_VIA_ADMIN=1``: every console test reaches its store through a
#: node's admin API (``BROKER_ADMIN_URL``), as a console deployed apart from
#: its node does; ``make test`` runs the console suite so on PostgreSQL.
VIA_ADMIN = os.environ.get("CONSOLE_VIA_ADMIN", "") not in ("", "0")
#: The admin token of every node a test starts (one cluster shares one token,
#: and the console has one CLUSTER_ADMIN_TOKEN_FILE).
ADMIN_TOKEN = "console-test-admin-token"


@pytest.fixture
def broker(settings: Any, tmp_path: Path) -> Iterator[Any]:
    """Point BROKER_STORE_DIR at a fresh directory and return its open Broker.

    With ``CONSOLE_VIA_ADMIN`` the pages ask for it through a real
    ``AdminServer`` (an endpoint over the same store, serving the console's
    operations over HTTP on 127.0.0.1) instead of opening it themselves."""
    from console.brokerlink import close_broker, get_broker

    close_broker()
    settings.BROKER_STORE_DIR = tmp_path / "store"
    settings.BROKER_STORE_OPTIONS = dict(SMALL_STORE)
    broker = get_broker()
    with contextlib.ExitStack() as stack:
        if VIA_ADMIN:
            stack.enter_context(_admin_api(settings, broker, tmp_path))
        yield broker
    close_broker()


@contextlib.contextmanager
def _admin_api(settings: Any, broker: Any, tmp_path: Path) -> Iterator[None]:
    from broker_core.cluster.admin import AdminServer
    from broker_core.endpoint.config import EndpointConfig
    from broker_core.endpoint.server import Endpoint
    from console.brokerlink import local_node_ops

    token_file = tmp_path / "admin_token"
    token_file.write_text(ADMIN_TOKEN)
    ep = Endpoint(broker, EndpointConfig())
    admin = AdminServer(
        ep, "127.0.0.1:0", ADMIN_TOKEN, node_ops=local_node_ops()
    ).start()
    settings.BROKER_ADMIN_URL = f"http://{admin.address}"
    settings.CLUSTER_ADMIN_TOKEN_FILE = str(token_file)
    try:
        yield
    finally:
        admin.stop()
        ep.close()


@pytest.fixture
def make_user(db: Any) -> Callable[..., Any]:
    from django.contrib.auth import get_user_model

    from console.ui.roles import set_role

    def make(username: str, role: str | None) -> Any:
        user = get_user_model().objects.create_user(
            username=username, password=PASSWORD
        )
        if role:
            set_role(user, role)
        return user

    return make


@pytest.fixture
def users(make_user: Callable[..., Any]) -> dict[str, Any]:
    """One user per role, plus ``none`` (signed in, no role)."""
    return {
        r: make_user(r, None if r == "none" else r)
        for r in ("viewer", "operator", "admin", "none")
    }


@pytest.fixture
def client_as(users: dict[str, Any]) -> Callable[[str], Any]:
    """``client_as("operator")``: a Django test client signed in with that role."""
    from django.test import Client

    def make(role: str) -> Any:
        c = Client()
        c.force_login(users[role])
        return c

    return make


@pytest.fixture
def api_as(users: dict[str, Any]) -> Callable[[str], Any]:
    """``api_as("viewer")``: a DRF client authenticating with that user's token."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    def make(role: str) -> Any:
        c = APIClient()
        token, _ = Token.objects.get_or_create(user=users[role])
        c.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return c

    return make


# --- browser --------------------------------------------------------------------
@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """One headless Chromium for the session (Debian's /usr/bin/chromium)."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium chromium-driver")
    # Playwright's sync API runs an event loop in this thread; the test's own
    # database calls are still synchronous and safe here.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@contextlib.contextmanager
def open_page(chromium: Any, base_url: str) -> Iterator[Any]:
    """A fresh browser context (own cookies) on ``base_url``, guarded: a request
    off that server or a Content-Security-Policy refusal fails the test."""
    context = chromium.new_context(
        base_url=base_url, viewport={"width": 1400, "height": 900}
    )
    context.set_default_timeout(10_000)
    # The console must work offline: any request off the test server fails the test.
    outside: list[str] = []

    def guard(route: Any) -> None:
        if route.request.url.startswith(base_url) or route.request.url.startswith(
            "data:"
        ):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", guard)
    pg = context.new_page()
    # Every page must satisfy the Content-Security-Policy: Chromium reports a
    # blocked script, style or handler on the console.
    refused: list[str] = []

    def on_console(m: Any) -> None:
        if "Content Security Policy" in m.text:
            # Where it came from: the page's URL and the script's place.
            refused.append(f"{m.text} [{pg.url} {m.location}]")

    pg.on("console", on_console)
    yield pg
    context.close()
    assert not outside, f"requests left the console: {outside}"
    assert not refused, f"the Content-Security-Policy refused: {refused}"


@pytest.fixture
def page(chromium: Any, live_server: Any) -> Iterator[Any]:
    """A page of ``open_page`` on the test's ``live_server``."""
    with open_page(chromium, live_server.url) as pg:
        yield pg


@pytest.fixture
def sign_in(users: dict[str, Any]) -> Callable[[Any, str], None]:
    def do(pg: Any, role: str) -> None:
        pg.goto("/login/")
        pg.fill("input[name=username]", users[role].username)
        pg.fill("input[name=password]", PASSWORD)
        pg.click("button[type=submit]")
        pg.wait_for_selector("[data-testid=role-badge]")

    return do


@pytest.fixture
def screenshot() -> Callable[[Any, str], Path]:
    """Save a full-page screenshot under artifacts/ (gitignored)."""

    def shot(pg: Any, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        pg.screenshot(path=str(path), full_page=True)
        return path

    return shot


@pytest.fixture
def grpc_endpoint(broker: Any, tmp_path: Path) -> Iterator[str]:
    """A real ``python -m broker_core serve`` on the console's store; yields
    its address and stops it (SIGTERM, clean exit) at the end."""
    from tests.endpoint_server import start_server, stop_server
    from tests.support import free_port

    port = free_port()
    server = start_server(broker.store.root, port, tmp_path / "endpoint.log")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        assert stop_server(server) == 0
