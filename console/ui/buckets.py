"""Counts per clock minute from cumulative counters sampled now and then.

A counter (messages stored, commits, check-backs...) is sampled every few
seconds by a periodic task, and at the start of every minute. The events of
minute [M, M+1) are the counter's value at the sample nearest M+1 minus its
value at the sample nearest M:
each bucket is a count, the buckets add up to exactly the counter's change
over the window, and a bucket never borrows from its neighbours (a rate
``delta x 60 / seconds`` between irregular samples drew 3 rollbacks as 4.0 a
minute and a steady 5 a minute as a 0-8 zig-zag).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any


def per_minute(
    samples: Sequence[tuple[datetime, dict[str, int]]], fields: Sequence[str]
) -> dict[str, list[Any]]:
    """``samples`` (time, counters) in time order -> ``{"t": [minute ISO],
    field: [count in that minute]}``, one entry per minute from the first
    sample's to the last's (the last one counted so far). A counter that goes
    down (a restart) counts 0."""
    out: dict[str, list[Any]] = {"t": [], **{f: [] for f in fields}}
    if len(samples) < 2:
        return out
    start = samples[0][0].replace(second=0, microsecond=0) + timedelta(minutes=1)
    end = samples[-1][0]
    i = 0
    last = samples[0][1]
    minute = start
    while minute <= end:
        # The sample nearest this minute's boundary (before or after it): the
        # sampler also runs at every minute's start, so that sample is a few
        # milliseconds past it and the minute's last events stay in it (the
        # last sample before it could be 10 s early: rollbacks at :58 were
        # drawn in the next minute).
        while i + 1 < len(samples) and abs(samples[i + 1][0] - minute) <= abs(
            samples[i][0] - minute
        ):
            i += 1
        now = samples[i][1]
        label = minute - timedelta(minutes=1)
        out["t"].append(label.isoformat())
        for f in fields:
            out[f].append(max(0, int(now.get(f, 0)) - int(last.get(f, 0))))
        last = now
        minute += timedelta(minutes=1)
    if samples[-1][0] > minute - timedelta(minutes=1):
        # The minute under way, counted so far: a chart has a point at once.
        out["t"].append((minute - timedelta(minutes=1)).isoformat())
        for f in fields:
            out[f].append(max(0, int(samples[-1][1].get(f, 0)) - int(last.get(f, 0))))
    return out
