"""Sorting and pagination shared by list pages (the API uses DRF's own)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.paginator import Page, Paginator
from django.http import HttpRequest

PAGE_SIZES = (25, 50, 100, 200)
DEFAULT_PAGE_SIZE = 50


def sort_queryset(
    request: HttpRequest, queryset: Any, allowed: Sequence[str], default: str
) -> tuple[Any, str]:
    """Order ``queryset`` by ``?sort=`` (``-`` prefix for descending) if allowed.

    Returns the queryset and the sort key actually used.
    """
    key = request.GET.get("sort") or default
    if key.lstrip("-") not in allowed:
        key = default
    return queryset.order_by(key, "pk"), key


def paginate(request: HttpRequest, items: Any, per_page: int | None = None) -> Page:
    """Return the page of ``items`` named by ``?page=`` and ``?per_page=``."""
    try:
        size = int(request.GET.get("per_page", per_page or DEFAULT_PAGE_SIZE))
    except ValueError:
        size = DEFAULT_PAGE_SIZE
    size = size if size in PAGE_SIZES else DEFAULT_PAGE_SIZE
    return Paginator(items, size).get_page(request.GET.get("page"))
