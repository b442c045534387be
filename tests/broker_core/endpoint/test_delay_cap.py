"""A delivery timestamp too far ahead is refused with ILLEGAL_DELIVERY_TIME.

The cap is RocketMQ 5's ``timerMaxDelaySec`` (3 days) unless ``serve
--max-delay-s`` (or ``$BROKER_MAX_DELAY_S``) says otherwise; the code is the
one Apache's proxy answers (``SendMessageActivity.validateDelayTime``). The
official Python client sends, the endpoint runs as ``python -m broker_core
serve``.
"""

from __future__ import annotations

import pytest

from tests.endpoint_server import result, spawn, start_server, stop_server
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]


@pytest.mark.parametrize(
    ("flags", "near_s", "far_s", "cap"),
    [
        ((), 2 * 86_400, 3 * 86_400 + 60, "3 days"),
        (("--max-delay-s", "60"), 30, 120, "1 min"),
    ],
    ids=["default-3-days", "max-delay-s-60"],
)
def test_delivery_time_beyond_the_cap_is_refused(
    tmp_path, monkeypatch, flags, near_s, far_s, cap
):
    monkeypatch.setenv("NEAR_S", str(near_s))
    monkeypatch.setenv("FAR_S", str(far_s))
    port = free_port()
    proc = start_server(tmp_path / "store", port, tmp_path / "server.log", flags)
    try:
        r = result(spawn("delay_cap", f"127.0.0.1:{port}", "c", tmp_path))
    finally:
        assert stop_server(proc) == 0
    assert r["near"] is True
    assert r["refused"] is not None, r
    assert r["refused"]["code"] == "ILLEGAL_DELIVERY_TIME"
    assert f"maximum delay of {cap}" in r["refused"]["message"]
