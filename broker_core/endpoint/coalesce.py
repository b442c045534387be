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
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any


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
            results = j.result() if error is None else [error] * len(batch)
            for (_item, fut), r in zip(batch, results, strict=True):
                if fut.done():  # its caller went away
                    continue
                if isinstance(r, BaseException):
                    fut.set_exception(r)
                else:
                    fut.set_result(r)
            if self.waiting:
                self._start(loop)

        job.add_done_callback(done)
