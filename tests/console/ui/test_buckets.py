"""Overview charts count per clock minute: the buckets add up to the counters'
real change, a steady rate draws flat, and samples are taken by a periodic
task, not by page views."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from console.ui.buckets import per_minute

T0 = datetime(2026, 11, 27, 10, 0, 5, tzinfo=UTC)


def test_three_rollbacks_are_three_not_four_a_minute() -> None:
    # Irregular samples (7 s, 23 s, 41 s apart) around three rollbacks.
    samples = [
        (T0, {"rollbacks": 0}),
        (T0 + timedelta(seconds=7), {"rollbacks": 1}),
        (T0 + timedelta(seconds=30), {"rollbacks": 3}),
        (T0 + timedelta(seconds=71), {"rollbacks": 3}),
        (T0 + timedelta(seconds=130), {"rollbacks": 3}),
    ]
    out = per_minute(samples, ["rollbacks"])
    assert out["t"] == [f"2026-11-27T10:0{m}:00+00:00" for m in (0, 1, 2)]
    assert out["rollbacks"] == [3, 0, 0]  # 10:02 so far
    assert sum(out["rollbacks"]) == 3


def test_a_steady_rate_draws_flat_whatever_the_sampling() -> None:
    # 5 check-backs a minute, one every 12 s; sampled every 10 s with jitter.
    samples = []
    t = 0.0
    while t < 600:
        at = T0 + timedelta(seconds=t)
        done = int((at - T0.replace(second=0)).total_seconds() // 12)
        samples.append((at, {"checks": done}))
        t += 10 + (3 if int(t) % 20 == 0 else -2)
    out = per_minute(samples, ["checks"])
    assert set(out["checks"][1:-1]) <= {4, 5, 6}  # never the 0-8 zig-zag
    # The buckets add up to the counter's change.
    assert sum(out["checks"]) == samples[-1][1]["checks"] - samples[0][1]["checks"]


def test_a_counter_reset_counts_zero_not_negative() -> None:
    samples = [(T0, {"n": 10}), (T0 + timedelta(seconds=60), {"n": 2})]
    assert per_minute(samples, ["n"])["n"] == [0, 0]


def test_samples_within_one_minute_make_one_point() -> None:
    samples = [(T0, {"n": 1}), (T0 + timedelta(seconds=20), {"n": 4})]
    out = per_minute(samples, ["n"])
    assert out == {"t": ["2026-11-27T10:00:00+00:00"], "n": [3]}


@pytest.mark.django_db
def test_the_sampler_task_stores_samples_by_the_clock(broker) -> None:
    from console.transactions.models import TransactionSample
    from console.transactions.tasks import sample

    TransactionSample.objects.all().delete()
    sample.apply()
    assert TransactionSample.objects.count() == 1
    sample.apply()  # within 10 s of the last: not stored twice
    assert TransactionSample.objects.count() == 1


def test_a_minute_s_last_events_stay_in_it() -> None:
    """13 rollbacks at 10:00:58, after the 10 s sample at 10:00:51 and before
    the minute's sample 40 ms past 10:01: drawn at 10:00 (they were drawn at
    10:01, which then read 14 for its one rollback)."""
    start = T0.replace(second=0)
    samples = [
        (start + timedelta(seconds=1), {"n": 0}),
        (start + timedelta(seconds=41), {"n": 2}),
        (start + timedelta(seconds=51), {"n": 2}),
        (start + timedelta(seconds=60.04), {"n": 15}),
        (start + timedelta(seconds=99), {"n": 16}),
        (start + timedelta(seconds=120.03), {"n": 16}),
    ]
    assert per_minute(samples, ["n"])["n"] == [15, 1, 0]
    # Without the sample at the boundary: the nearest one, 2 s before it.
    samples[3] = (start + timedelta(seconds=58), {"n": 15})
    assert per_minute(samples, ["n"])["n"] == [15, 1, 0]


@pytest.mark.django_db
def test_a_sample_at_a_minute_s_start_is_stored_even_10_s_after_the_last(
    broker,
) -> None:
    """The beat's sample at each minute's start bounds the minutes: stored
    although the last sample (at :55) is under 10 s old."""
    from unittest import mock

    from console.transactions.models import TransactionSample
    from console.transactions.services import sample_metrics

    TransactionSample.objects.all().delete()
    base = datetime(2026, 11, 29, 7, 0, 55, tzinfo=UTC)
    with mock.patch("django.utils.timezone.now", return_value=base):
        sample_metrics()
    with mock.patch(
        "django.utils.timezone.now", return_value=base + timedelta(seconds=5.05)
    ):
        sample_metrics()
    with mock.patch(
        "django.utils.timezone.now", return_value=base + timedelta(seconds=6)
    ):
        sample_metrics()
    assert TransactionSample.objects.count() == 2
