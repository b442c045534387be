"""Long polls waiting for messages, by topic (the endpoint's wait lists).

A receive that found nothing waits on its topic's event (``wait_list``);
whoever stores something there wakes it (``wake``): a send, a commit, or the
endpoint's watch of other processes' appends (``wake_all``). Everything here
runs on the event loop."""

from __future__ import annotations

import asyncio


class PollWaits:
    """The wait lists of one endpoint."""

    def __init__(self) -> None:
        #: topic -> the event its long polls wait on (set by ``wake``)
        self.wakeups: dict[str, asyncio.Event] = {}
        #: set when a long poll joins an empty wait list: the append watcher
        #: sleeps on it instead of polling while nobody waits
        self.first_waiter = asyncio.Event()
        #: receives polling each topic now (between join_poll and leave_poll)
        self._polling: dict[str, int] = {}
        #: the endpoint is stopping: long polls answer now (``close``)
        self.closing = False

    def join_poll(self, topic: str) -> None:
        """A receive on ``topic`` starts polling (``leave_poll`` when it ends)."""
        self._polling[topic] = self._polling.get(topic, 0) + 1

    def leave_poll(self, topic: str) -> None:
        left = self._polling[topic] - 1
        if left:
            self._polling[topic] = left
        else:
            del self._polling[topic]
            self.wakeups.pop(topic, None)

    def wait_list(self, topic: str) -> asyncio.Event:
        """The event a long poll on ``topic`` waits on (set by ``wake``)."""
        ev = self.wakeups.get(topic)
        if ev is None:
            if not self.wakeups:
                self.first_waiter.set()
            ev = self.wakeups[topic] = asyncio.Event()
        return ev

    def wake(self, topic: str) -> None:
        ev = self.wakeups.pop(topic, None)
        if ev is not None:
            ev.set()

    def wake_all(self) -> None:
        waiting = list(self.wakeups.values())
        self.wakeups.clear()
        for ev in waiting:
            ev.set()

    def close(self) -> None:
        """The endpoint stops: every long poll answers what it has (nothing,
        MESSAGE_NOT_FOUND) instead of being cut off with the server."""
        self.closing = True
        self.wake_all()

    @property
    def polling(self) -> int:
        """How many receives are polling now."""
        return sum(self._polling.values())
