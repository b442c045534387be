"""Page numbers, offsets and counts of the API's lists, refused before they
reach a node or the database when they are no page anyone can ask for.

DRF's ``PageNumberPagination`` answers a page that is not a positive integer
with 404 ``not_found`` "Invalid page."; the console's lists that a node
answers (``/api/transactions/``, ``/api/delay-scheduled/``, a queue's
messages, the message search) do the same for their ``page``, and refuse any
other integer parameter outside its range with 400 ``invalid``, so that a
number beyond what the node's index can hold (SQLite's integers are 64-bit)
is the caller's error, not the node's failure. ``BoundedLimitOffsetPagination``
(every list over the console's own tables) bounds ``offset`` and ``limit``
alike.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import NotFound
from rest_framework.pagination import LimitOffsetPagination

from broker_core.errors import ValidationError

#: The last page number any list answers: far beyond any real list (a
#: million pages of the largest page size is a billion rows), far within
#: what a node's index can count.
MAX_PAGE = 1_000_000
#: The largest offset, position or time (ms) the lists accept: within
#: SQLite's signed 64-bit integers, with room for the arithmetic after.
MAX_INT = (1 << 62) - 1

INVALID_PAGE = "Invalid page."


def page_number(value: Any, default: int = 1) -> int:
    """``?page=`` as a page number (1..``MAX_PAGE``); anything else is DRF's
    404 ``not_found`` "Invalid page."."""
    try:
        number = int_param(value, "page", default, 1, MAX_PAGE)
    except ValidationError as exc:
        raise NotFound(INVALID_PAGE) from exc
    return default if number is None else number


def int_param(
    value: Any,
    name: str,
    default: int | None = None,
    low: int = 0,
    high: int = MAX_INT,
) -> int | None:
    """An integer query parameter within ``low..high`` (``default`` when
    absent); anything else is 400 ``invalid`` naming it."""
    if value in (None, ""):
        return default
    try:
        number = int(str(value).strip())
    except ValueError as exc:
        raise ValidationError(f"{name} must be an integer") from exc
    if not low <= number <= high:
        raise ValidationError(f"{name} must be within {low}..{high}")
    return number


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """DRF's ``LimitOffsetPagination`` (``?limit=&offset=``) whose offset is
    refused beyond ``MAX_INT`` (404 "Invalid page.", as an invalid page) and
    whose limit is at most ``max_limit``, instead of a database's overflow."""

    max_limit = 1000

    def get_offset(self, request: Any) -> int:
        raw = request.query_params.get(self.offset_query_param)
        if raw not in (None, ""):
            try:
                number = int(str(raw).strip())
            except ValueError:
                return 0  # DRF's own: a bad offset is the first page
            if number > MAX_INT:
                raise NotFound(INVALID_PAGE)
        return super().get_offset(request)
