"""The set-up starts a private Redis when none answers at REDIS_URL."""

from __future__ import annotations

import pytest
import redis

from console.core import ensure_redis
from tests.support import free_port as _free_port


@pytest.mark.services
def test_starts_private_redis_then_reuses_it(tmp_path):
    url = f"redis://127.0.0.1:{_free_port()}/0"
    try:
        assert ensure_redis.ensure(url, tmp_path) == "started"
        assert (tmp_path / "redis" / "redis.pid").exists()
        assert redis.Redis.from_url(url).ping()
        # Running the set-up again finds it up and starts nothing new.
        assert ensure_redis.ensure(url, tmp_path) == "up"
    finally:
        try:
            redis.Redis.from_url(url).shutdown(nosave=True)
        except redis.ConnectionError:
            pass
