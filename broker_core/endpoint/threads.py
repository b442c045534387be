"""Where the endpoint's blocking work runs, off the event loop.

Sends and transactions go to one writer thread (appends are serialised by the
store anyway), the pop state (not thread-safe) to the consumer lanes. While
another process holds the append lock, only sends wait; receives, acks,
heartbeats and routes go on."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from broker_core.endpoint.coalesce import Lanes


class Threads:
    """The writer thread and the consumer lanes of one endpoint; ``pop`` is
    its ``PopManager`` (started again by ``pop_locked`` when its file turned
    out damaged)."""

    def __init__(self, pop: Any) -> None:
        self.pop = pop
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="endpoint-writer")
        self.consumer = Lanes("endpoint-pop")
        #: Held by whoever touches the pop state: the consumer thread, or the
        #: event loop for an ack when it is free (never waited for there).
        self.pop_lock = threading.Lock()

    async def on_writer(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a store write on the writer thread."""
        return await asyncio.get_running_loop().run_in_executor(self.writer, fn, *args)

    async def on_consumer(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a pop-state operation on the consumer thread (behind the pops
        already waiting for it)."""
        return await asyncio.get_running_loop().run_in_executor(
            self.consumer, self.pop_locked, fn, *args
        )

    async def on_consumer_first(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a short pop-state write (a change of invisibility, a move to
        the dead-letter queue) on the consumer thread ahead of waiting pops."""
        return await asyncio.get_running_loop().run_in_executor(
            self.consumer.first, self.pop_locked, fn, *args
        )

    def pop_locked(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn`` holding the pop-state lock (on the consumer thread);
        once more if the pop state turned out damaged and was started again."""
        with self.pop_lock:
            try:
                return fn(*args)
            except sqlite3.DatabaseError as exc:
                if not self.pop.recover(exc):
                    raise
            return fn(*args)

    def shutdown(self) -> None:
        """Let the calls in flight finish (no half-done append or pop change)."""
        self.writer.shutdown(wait=True)
        self.consumer.shutdown(wait=True)
