"""The health endpoint."""

from django.http import HttpRequest, JsonResponse
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
