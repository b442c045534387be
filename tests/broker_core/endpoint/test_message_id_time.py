"""A send's retry check after a restart skips the index for ids made since."""

from __future__ import annotations

import time

from rocketmq.v5.util.message_id_codec import MessageIdCodec

from broker_core.endpoint.sending import ID_CLOCK_SKEW_S, made_after


def _id(made_s: int) -> str:
    return "01" + "AABBCCDDEEFF" + "0102" + f"{made_s - 1_609_459_200:08X}" + "00000001"


def test_the_official_clients_ids_tell_when_they_were_made() -> None:
    now_ms = int(time.time() * 1000)
    fresh = MessageIdCodec().next_message_id()
    assert made_after(fresh, now_ms - (ID_CLOCK_SKEW_S + 120) * 1000)
    # Not provably after a run that started just now: a client clock a little
    # ahead could have made it before.
    assert not made_after(fresh, now_ms)


def test_only_well_formed_version_01_ids_count() -> None:
    start_ms = 1_800_000_000_000
    later = start_ms // 1000 + ID_CLOCK_SKEW_S + 1
    assert made_after(_id(later), start_ms)
    assert not made_after(_id(later - 2), start_ms)
    assert not made_after("00" + _id(later)[2:], start_ms)  # version 0: no time
    assert not made_after(_id(later)[:-1], start_ms)
    assert not made_after(_id(later)[:18] + "ZZZZZZZZ" + "00000001", start_ms)
    assert not made_after("01RETRYSEND0000000000000000000001", start_ms)
