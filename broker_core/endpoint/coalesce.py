"""Group calls that arrive together into one job on a worker thread.

The endpoint's handlers run on one event loop; store work runs on a thread.
Handing each call to the thread costs a hop (futures, a wake-up, the GIL
changing hands) that can cost more than the work; for sends it also costs one
append (lock, write, queue units) per call. A ``Coalescer`` runs one job at a
time: calls that arrive while a job runs wait together and become the next
job, so a burst of concurrent calls costs one hop and, for sends, one append
(group commit). A lone call is not delayed: with nothing running, its job
starts at once.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Any

#: A batch handler's answer for a call it leaves to the RPC's own handler
#: (``server.Method.batch``): that call is served like any other.
PER_CALL: Any = object()


def _settle(
    batch: list[tuple[Any, asyncio.Future[Any]]], results: Sequence[Any]
) -> None:
    """Hand each waiting caller its result: an exception is raised to it."""
    for (_item, fut), r in zip(batch, results, strict=True):
        if fut.done():  # its caller went away
            continue
        if isinstance(r, BaseException):
            fut.set_exception(r)
        else:
            fut.set_result(r)


class Coalescer:
    """``await submit(item)`` runs ``run(items)`` on ``executor`` with the items
    gathered meanwhile and returns this item's result. ``run`` returns one
    result per item, in order; a result that is an exception is raised to its
    caller alone, an exception raised by ``run`` to every caller of that job."""

    def __init__(
        self, executor: Executor, run: Callable[[list[Any]], Sequence[Any]]
    ) -> None:
        self.executor = executor
        self.run = run
        self.waiting: list[tuple[Any, asyncio.Future[Any]]] = []
        self.busy = False
        #: Jobs run and items handled, for the endpoint's counters.
        self.jobs = 0
        self.items = 0

    async def submit(self, item: Any) -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self.waiting.append((item, fut))
        if not self.busy:
            self._start(loop)
        return await fut

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self.waiting = self.waiting, []
        self.busy = True
        self.jobs += 1
        self.items += len(batch)
        job = loop.run_in_executor(self.executor, self.run, [i for i, _ in batch])

        def done(j: asyncio.Future[Any]) -> None:
            self.busy = False
            error = j.exception()
            _settle(batch, j.result() if error is None else [error] * len(batch))
            if self.waiting:
                self._start(loop)

        job.add_done_callback(done)


class TickBatch:
    """``await submit(item)`` runs ``run(items)`` on the event loop itself,
    once, at the end of the loop iteration in which the first of them came:
    every call that reached the same point in that iteration goes with it.

    The native front hands over the calls that arrived together in one
    ``drain()``; their tasks all take their first step in the next iteration,
    so their sends become one append and their acks one pop-state
    transaction. On grpc.aio calls mostly come one an iteration, and a lone
    call waits only for the rest of its iteration. ``run`` returns one result
    per item, in order; an exception it raises goes to every caller of that
    batch (for the caller to go the slow way)."""

    def __init__(self, run: Callable[[list[Any]], Sequence[Any]]) -> None:
        self.run = run
        self.waiting: list[tuple[Any, asyncio.Future[Any]]] = []
        #: batches run and items handled, for the endpoint's counters
        self.batches = 0
        self.items = 0

    def run_in_place(
        self,
        out: list[Any],
        todo: list[int],
        items: list[Any],
        run: Callable[[list[Any]], Sequence[Any]],
        busy: type[Exception],
        answer: Callable[[int, Any], Any],
    ) -> list[Any]:
        """A native drain's batch, run now instead of through ``submit``:
        ``run(items)`` (one result per item), ``out[todo[k]]`` set to
        ``answer(todo[k], result)``. ``busy`` raised: nothing was done, ``out``
        is returned as it is (its calls go the per-call way); any other
        exception goes into each of ``todo``'s places."""
        if not items:
            return out
        try:
            results = run(items)
        except busy:
            return out
        except Exception as exc:  # noqa: BLE001 - as the per-call path raises it
            for i in todo:
                out[i] = exc
            return out
        self.batches += 1
        self.items += len(items)
        for i, r in zip(todo, results, strict=True):
            out[i] = answer(i, r)
        return out

    async def submit(self, item: Any) -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if not self.waiting:
            loop.call_soon(self._flush)
        self.waiting.append((item, fut))
        return await fut

    def _flush(self) -> None:
        batch, self.waiting = self.waiting, []
        self.batches += 1
        self.items += len(batch)
        try:
            results: Sequence[Any] = self.run([i for i, _ in batch])
        except Exception as exc:  # noqa: BLE001 - handed to each caller
            results = [exc] * len(batch)
        _settle(batch, results)


class Lanes(Executor):
    """One worker thread with two lanes: work submitted to ``first`` runs
    before anything waiting in the ordinary lane.

    The pop state lives on one thread. Pops are the bulk of its work (a long
    poll woken by a send may bring dozens of them at once), while an ack or a
    ChangeInvisibleDuration is one short write whose caller has a deadline of
    a few seconds, and whose lateness has a cost: an invisibility extended too
    late is a message delivered twice. Queued behind every pended pop, a
    change could miss both on a busy machine; in the first lane it waits for
    at most the one job already running."""

    def __init__(self, name: str) -> None:
        self._queue: queue.PriorityQueue[tuple[int, int, Any]] = queue.PriorityQueue()
        self._seq = itertools.count()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()
        self.first = _Lane(self, 0)

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Future[Any]:
        return self._put(1, fn, args, kwargs)

    def _put(
        self, lane: int, fn: Callable[..., Any], args: Any, kwargs: Any
    ) -> Future[Any]:
        if self._closed:
            raise RuntimeError("cannot schedule new work after shutdown")
        fut: Future[Any] = Future()
        self._queue.put((lane, next(self._seq), (fut, fn, args, kwargs)))
        return fut

    def _work(self) -> None:
        while True:
            _lane, _seq, job = self._queue.get()
            if job is None:
                return
            fut, fn, args, kwargs = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                fut.set_exception(exc)
            else:
                fut.set_result(result)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if not self._closed:
            self._closed = True
            # Last in the last lane: what was submitted before still runs.
            self._queue.put((2, next(self._seq), None))
        if wait and self._thread is not threading.current_thread():
            self._thread.join()


class _Lane(Executor):
    """The first lane of a ``Lanes``, usable wherever an executor is."""

    def __init__(self, lanes: Lanes, lane: int) -> None:
        self._lanes = lanes
        self._lane = lane

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Future[Any]:
        return self._lanes._put(self._lane, fn, args, kwargs)
