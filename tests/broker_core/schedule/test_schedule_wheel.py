"""The timer wheel: due order, never early, bounded ticks."""

from __future__ import annotations

import random

from broker_core.schedule import TimerWheel


def test_pops_only_due_in_order() -> None:
    w = TimerWheel(bucket_ms=100)
    dues = [1000, 1050, 1099, 1100, 5000, 1_000_000]
    shuffled = dues[:]
    random.Random(1).shuffle(shuffled)
    for i, d in enumerate(shuffled):
        w.add((d, i, i * 10))
    assert w.next_due() == 1000
    assert w.pop_due(999, 100) == []
    assert [e[0] for e in w.pop_due(1050, 100)] == [1000, 1050]
    assert [e[0] for e in w.pop_due(1100, 100)] == [1099, 1100]
    assert len(w) == 2
    assert [e[0] for e in w.pop_due(2_000_000, 100)] == [5000, 1_000_000]
    assert w.next_due() is None


def test_limit_and_skip() -> None:
    w = TimerWheel(bucket_ms=10)
    w.add_unsorted([(d, d, d) for d in range(500, 0, -1)])
    first = w.pop_due(1000, 100, skip=lambda e: e[1] % 2 == 0)
    assert [e[0] for e in first] == list(range(1, 200, 2))
    rest = w.pop_due(1000, 1000)
    assert [e[0] for e in rest] == list(range(200, 501))


def test_earliest_for_browsing() -> None:
    w = TimerWheel()
    for d in (900, 300, 600, 86_400_000):
        w.add((d, d, d))
    assert [e[0] for e in w.earliest(2)] == [300, 600]
    assert [e[0] for e in w.earliest(2, start=2)] == [900, 86_400_000]
