"""Template context shared by every page: the user's role and what it allows."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from console.ui.roles import ADMIN, OPERATOR, VIEWER, has_role, user_role


def roles(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {
            "console_role": None,
            "can_view": False,
            "can_operate": False,
            "can_admin": False,
        }
    return {
        "console_role": user_role(user),
        "can_view": has_role(user, VIEWER),
        "can_operate": has_role(user, OPERATOR),
        "can_admin": has_role(user, ADMIN),
    }


#: Top navigation: (label, url name). Pages not built yet render greyed out.
NAV = (
    ("Overview", "overview"),
    ("Transactions", "transactions:list"),
    ("Delay queues", "delays:list"),
    ("Topics", "topics:list"),
    ("Messages", "messages:search"),
    ("Consumer groups", "consumers:list"),
    ("Producer groups", "producers:list"),
    ("Reports", "reports:list"),
    ("Node", "node"),
    ("Cluster", "cluster:overview"),
    ("Audit", "audit:list"),
    ("API docs", "api-docs"),
)


def navigation(request: HttpRequest) -> dict[str, Any]:
    from django.urls import NoReverseMatch, reverse

    items = []
    path = request.path
    for label, name in NAV:
        try:
            url = reverse(name)
        except NoReverseMatch:
            url = None
        active = url is not None and (
            path == url if url == "/" else path.startswith(url)
        )
        items.append({"label": label, "url": url, "active": active})
    from django.conf import settings

    from console.ui.pagination import PAGE_SIZES

    return {
        "nav_items": items,
        "page_sizes": PAGE_SIZES,
        "live_refresh_s": getattr(settings, "LIVE_REFRESH_SECONDS", 15),
    }
