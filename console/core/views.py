"""Overview page and the health endpoint."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from console.core.health import run_checks


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """Answer 200 when every component is up, else 503 naming what is down."""
    healthy, components = run_checks()
    down = sorted(name for name, c in components.items() if c["status"] != "up")
    body = {
        "status": "ok" if healthy else "down",
        "down": down,
        "components": components,
    }
    return JsonResponse(body, status=200 if healthy else 503)


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    return render(request, "core/overview.html", {})
