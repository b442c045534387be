"""The health endpoint, and the node page."""

from __future__ import annotations

import platform
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from console.core.health import run_checks
from console.ui.permissions import viewer_required


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """Answer 200 when every component is up, else 503 naming what is down."""
    healthy, components = run_checks()
    down = sorted(name for name, c in components.items() if c["status"] != "up")
    if not request.user.is_authenticated:
        # A probe needs what is up and what is down; the details (paths,
        # addresses, hosts, errors) are for signed-in users.
        components = {name: {"status": c["status"]} for name, c in components.items()}
    body = {
        "status": "ok" if healthy else "down",
        "down": down,
        "components": components,
    }
    return JsonResponse(body, status=200 if healthy else 503)


def _where(url: str) -> str:
    """A URL without its credentials: scheme, host, port and path."""
    if not url:
        return ""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _console_settings() -> list[tuple[str, str]]:
    """What this console runs with, as an operator asks at 3 a.m.; no secret."""
    db = connection.settings_dict
    database = connection.vendor
    if db.get("HOST"):
        database += f" {db['HOST']}:{db.get('PORT') or ''}/{db.get('NAME')}"
    else:
        database += f" {db.get('NAME')}"
    admin_url = getattr(settings, "BROKER_ADMIN_URL", "")
    return [
        ("gRPC endpoint (GRPC_LISTEN)", settings.GRPC_LISTEN or "none on this host"),
        (
            "Store",
            f"through the admin API {_where(admin_url)}"
            if admin_url
            else f"opened by the console: {settings.BROKER_STORE_DIR}",
        ),
        ("Database", database),
        ("Redis (Celery, check-backs)", _where(settings.REDIS_URL)),
        ("Cluster", getattr(settings, "BROKER_CLUSTER", "") or "none: a single node"),
        (
            "Spark",
            getattr(settings, "SPARK_MASTER", "") or "local mode (SPARK_MASTER empty)",
        ),
        ("Python", platform.python_version()),
    ]


@viewer_required
def node(request: HttpRequest) -> HttpResponse:
    """The node the store pages show: its processes' health, its disk, its
    configuration and counts; and the console's own settings."""
    from broker_core.cluster.node_ops import NodeUnavailableError
    from console.brokerlink import node_ops

    context: dict[str, Any] = {"settings": _console_settings()}
    try:
        runtime = node_ops().node_runtime()
    except NodeUnavailableError as exc:
        context["error"] = str(exc)
    else:
        total = runtime["disk_total_bytes"]
        limit = runtime["disk_limit"]
        runtime["log_bytes"] = runtime["log_end"] - runtime["log_start"]
        if total and limit < 1.0:
            # Bytes the log may still grow by before appends are refused.
            runtime["room_bytes"] = max(
                0, int(total * limit) - (total - runtime["disk_free_bytes"])
            )
        context["runtime"] = runtime
        context["config"] = sorted(runtime["config"].items())
    _healthy, context["components"] = run_checks()
    return render(request, "core/node.html", context)
