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


@pytest.mark.services
def test_stop_leaves_a_private_server_for_another_url(tmp_path):
    """``make test`` pointed at another REDIS_URL stops only the private
    server at that URL: one ``make run`` started under the same var/ for
    another port keeps running."""
    url = f"redis://127.0.0.1:{_free_port()}/0"
    other = f"redis://127.0.0.1:{_free_port()}/0"
    try:
        assert ensure_redis.ensure(url, tmp_path) == "started"
        said = ensure_redis.stop(tmp_path, other)
        assert said.startswith("not stopped") and other in said
        assert redis.Redis.from_url(url).ping()
        assert ensure_redis.stop(tmp_path, url).startswith("stopped")
        with pytest.raises(redis.ConnectionError):
            redis.Redis.from_url(url, socket_timeout=1).ping()
    finally:
        try:
            redis.Redis.from_url(url).shutdown(nosave=True)
        except redis.ConnectionError:
            pass
