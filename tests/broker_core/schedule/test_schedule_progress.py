"""Progress bookkeeping: the done-set of timers stays small and round-trips."""

from __future__ import annotations

import random

from broker_core.schedule.progress import Progress, RangeSet


def _values(rs: RangeSet) -> set[int]:
    return {v for a, b in rs.runs() for v in range(a, b + 1)}


def test_range_set_matches_a_set() -> None:
    rng = random.Random(3)
    for _ in range(100):
        rs, ref = RangeSet(), set()
        for _ in range(rng.randint(0, 300)):
            x = rng.randint(0, 200)
            rs.add(x)
            ref.add(x)
        assert _values(rs) == ref
        assert all((v in rs) == (v in ref) for v in range(-2, 205))
        low = rng.randint(0, 210)
        rs.drop_below(low)
        assert _values(RangeSet(rs.runs())) == {v for v in ref if v >= low}


def test_done_timers_cost_memory_per_gap_not_per_delivery() -> None:
    p = Progress()
    # Offset 0 is a timer days ahead; the next 100,000 are delivered meanwhile.
    for q in range(1, 100_001):
        p.mark_timer_done(q)
    assert p.timer_low == 0 and len(p.timer_done.runs()) == 1
    assert not p.timer_is_done(0) and p.timer_is_done(100_000)
    p.mark_timer_done(0)
    assert p.timer_low == 100_001 and p.timer_done.runs() == []
    again = Progress.from_json(p.to_json())
    assert again.timer_low == 100_001
