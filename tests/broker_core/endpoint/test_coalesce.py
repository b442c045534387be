"""The endpoint's Coalescer: calls arriving while a job runs become one job;
each caller gets its own result or exception; a caller gone away is skipped."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from broker_core.endpoint.coalesce import Coalescer, Lanes


def _in_own_loop(coro_fn):
    # A loop of its own in a thread of its own (a browser test may have left
    # one running in this thread).
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(coro_fn())).result()


def test_calls_arriving_during_a_job_are_one_job() -> None:
    jobs: list[list[int]] = []
    gate = threading.Event()

    def run(items: list[int]) -> list[object]:
        if not jobs:
            gate.wait(5)  # the first job is slow: the rest pile up meanwhile
        jobs.append(items)
        return [ValueError(f"bad {i}") if i == 7 else i * 10 for i in items]

    async def scenario():
        with ThreadPoolExecutor(1) as ex:
            c = Coalescer(ex, run)
            first = asyncio.ensure_future(c.submit(0))
            await asyncio.sleep(0.05)
            rest = [asyncio.ensure_future(c.submit(i)) for i in range(1, 10)]
            await asyncio.sleep(0.01)  # all nine are waiting for the next job
            gone = rest[2]  # item 3: its caller goes away while it waits
            gone.cancel()
            await asyncio.sleep(0.05)
            gate.set()
            results = await asyncio.gather(first, *rest, return_exceptions=True)
            return c, results

    c, results = _in_own_loop(scenario)
    assert jobs == [[0], list(range(1, 10))]  # one hop for nine calls
    assert (c.jobs, c.items) == (2, 10)
    assert results[0] == 0 and results[1] == 10 and results[9] == 90
    assert isinstance(results[3], asyncio.CancelledError)
    assert isinstance(results[7], ValueError) and str(results[7]) == "bad 7"


def test_a_failing_job_fails_each_of_its_callers() -> None:
    def run(items: list[int]) -> list[int]:
        raise OSError("disk gone")

    async def scenario():
        with ThreadPoolExecutor(1) as ex:
            c = Coalescer(ex, run)
            with pytest.raises(OSError, match="disk gone"):
                await c.submit(1)
            assert not c.busy  # the next call starts a new job

    _in_own_loop(scenario)


def test_first_lane_runs_before_the_waiting_pops() -> None:
    """A change of invisibility submitted behind many pops runs right after
    the job in progress, not after every pop that waits."""
    lanes = Lanes("test-lanes")
    ran: list[str] = []
    gate = threading.Event()
    try:
        busy = lanes.submit(gate.wait)  # the pop in progress
        pops = [lanes.submit(ran.append, f"pop{i}") for i in range(5)]
        change = lanes.first.submit(ran.append, "change")
        failing = lanes.first.submit(int, "not a number")
        gate.set()
        for f in [busy, change, *pops]:
            f.result(5)
        assert ran == ["change", "pop0", "pop1", "pop2", "pop3", "pop4"]
        with pytest.raises(ValueError):
            failing.result(5)
    finally:
        lanes.shutdown(wait=True)
    with pytest.raises(RuntimeError):
        lanes.submit(ran.append, "late")


def test_lanes_shutdown_runs_what_was_submitted() -> None:
    lanes = Lanes("test-lanes")
    ran: list[int] = []
    for i in range(3):
        lanes.submit(ran.append, i)
    lanes.shutdown(wait=True)
    assert ran == [0, 1, 2]
