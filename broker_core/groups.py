"""Consumer group settings (RocketMQ ``SubscriptionGroupConfig``).

``config/subscriptionGroup.json`` holds what a group's consumers are told and
held to: whether the group consumes FIFO (``consumeMessageOrderly``: a message
group's next message is delivered only once the one before is acknowledged)
and how many deliveries a message gets before it goes to ``%DLQ%<group>``
(``retryMaxTimes`` + 1). A group with no entry gets the defaults (not FIFO,
the endpoint's ``max_delivery_attempts``), as Apache RocketMQ's auto-created
groups do. Every process reads the file; a change is seen by the others within
``RELOAD_S`` (the file's modification time is checked at most that often).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from broker_core.errors import ValidationError
from broker_core.metadata import atomic_write_json, read_config
from broker_core.validation import validate_group

RELOAD_S = 1.0
#: Apache RocketMQ's bounds on retryMaxTimes (0..) as delivery attempts.
MAX_ATTEMPTS = 1000


@dataclass(frozen=True, slots=True)
class GroupConfig:
    name: str
    fifo: bool = False
    #: deliveries before the dead-letter queue; None: the endpoint's default
    max_delivery_attempts: int | None = None


class GroupRegistry:
    """Create, change, delete and look up consumer group settings."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._groups: dict[str, GroupConfig] = {}
        self._mtime: int | None = None
        self._checked = 0.0
        self._lock = threading.Lock()
        self._load()

    def _load(self) -> None:
        try:
            mtime: int | None = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            mtime = None
        if mtime == self._mtime and self._mtime is not None:
            return
        self._groups = read_config(
            self.path,
            "subscriptionGroupTable",
            lambda raw: {
                n: GroupConfig(name=n, **{k: v for k, v in c.items() if k != "name"})
                for n, c in raw.items()
            },
        )
        self._mtime = mtime

    def _fresh(self) -> dict[str, GroupConfig]:
        now = time.monotonic()
        if now - self._checked >= RELOAD_S:
            with self._lock:
                self._checked = now
                self._load()
        return self._groups

    def get(self, group: str) -> GroupConfig | None:
        return self._fresh().get(group)

    def all(self) -> list[GroupConfig]:
        return sorted(self._fresh().values(), key=lambda g: g.name)

    def is_fifo(self, group: str) -> bool:
        g = self._fresh().get(group)
        return g is not None and g.fifo

    def max_attempts(self, group: str, default: int) -> int:
        g = self._fresh().get(group)
        if g is None or g.max_delivery_attempts is None:
            return default
        return g.max_delivery_attempts

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """This process's threads and every other process: a change reads,
        edits and writes the file with nobody else doing the same."""
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(
                self.path.with_name(self.path.name + ".lock"),
                os.O_RDWR | os.O_CREAT,
                0o644,
            )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def put(
        self, group: str, fifo: bool = False, max_delivery_attempts: int | None = None
    ) -> GroupConfig:
        """Create or replace a group's settings. Raises ``ValidationError``."""
        validate_group(group)
        if not isinstance(fifo, bool):
            raise ValidationError(f"fifo must be true or false, not {fifo!r}")
        if max_delivery_attempts is not None and (
            not isinstance(max_delivery_attempts, int)
            or isinstance(max_delivery_attempts, bool)
        ):
            raise ValidationError(
                "max delivery attempts must be an integer, not "
                f"{type(max_delivery_attempts).__name__}"
            )
        if max_delivery_attempts is not None and not (
            1 <= max_delivery_attempts <= MAX_ATTEMPTS
        ):
            raise ValidationError(
                f"max delivery attempts must be between 1 and {MAX_ATTEMPTS}"
            )
        cfg = GroupConfig(group, bool(fifo), max_delivery_attempts)
        with self._locked():
            self._mtime = None
            self._load()
            groups = dict(self._groups)
            groups[group] = cfg
            self._write(groups)
        return cfg

    def delete(self, group: str) -> bool:
        with self._locked():
            self._mtime = None
            self._load()
            if group not in self._groups:
                return False
            groups = {n: g for n, g in self._groups.items() if n != group}
            self._write(groups)
            return True

    def _write(self, groups: dict[str, GroupConfig]) -> None:
        atomic_write_json(
            self.path,
            {
                "subscriptionGroupTable": {
                    n: {k: v for k, v in asdict(g).items() if k != "name"}
                    for n, g in groups.items()
                }
            },
        )
        self._groups = groups
        self._mtime = self.path.stat().st_mtime_ns
        self._checked = time.monotonic()
