"""The overview's charts say what they cover and show an empty state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from console.overview.views import chart_window

pytestmark = pytest.mark.django_db


def test_charts_name_the_window_they_really_cover() -> None:
    t0 = datetime(2026, 11, 23, 21, 0, tzinfo=UTC)
    at = [(t0 + timedelta(minutes=m)).isoformat() for m in (0, 1, 2, 3)]
    assert chart_window([]) == "no data yet"
    assert chart_window(at) == "last 3 min (data since 21:00 UTC)"
    day = [t0.isoformat(), (t0 + timedelta(hours=24)).isoformat()]
    assert chart_window(day) == "last 24 h"


def test_an_empty_overview_says_why_its_charts_are_empty(client_as, broker) -> None:
    body = client_as("viewer").get("/").content.decode()
    assert 'data-testid="traffic-empty"' in body and "no data yet" in body
    assert "last 24 hours" not in body
