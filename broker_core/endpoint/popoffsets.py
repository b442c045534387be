"""The pop state's offsets as the rest of the broker sees them: an operator's
offset reset applied to the pop cursors, and each queue's low-water mark
mirrored to the store's consumer offsets (where the console reads lag).

An operator's offset reset (the console) must reach the pop cursor, which
would otherwise override the committed offset: ``request_reset`` leaves a
request under ``<store>/grpc/resets/`` that an endpoint applies within half
a second (or when it next starts), in the transaction that removes it; the
requests are read and removed under the pop state's write lock, so each is
applied once, by one endpoint process.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from broker_core.endpoint import retrytopic as RT
from broker_core.endpoint.popstate import PopState
from broker_core.metadata import atomic_write_json
from broker_core.store import MessageStore

RESETS_DIR = Path("grpc") / "resets"

log = logging.getLogger(__name__)


def request_reset(
    store_root: str | os.PathLike[str], group: str, topic: str, offsets: dict[int, int]
) -> Path:
    """Ask the endpoint to restart pop consumption of ``group`` on ``topic`` at
    ``offsets`` (queue id -> offset): in-flight messages of those queues are
    forgotten (their handles go stale) and reading resumes there."""
    directory = Path(store_root) / RESETS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{time.time_ns():020d}-{os.getpid()}.json"
    body = {
        "group": group,
        "topic": topic,
        "offsets": {str(q): o for q, o in offsets.items()},
    }
    atomic_write_json(path, body)
    return path


class PopOffsets:
    """Resets in, low-water marks out, for the pop state ``state`` of
    ``store``. ``queue_nums(topic)`` is the topic's read queue count;
    ``on_reset(group, key, qid)`` tells the pop manager a queue's entries
    are gone (what it knows of them goes too)."""

    def __init__(
        self,
        store: MessageStore,
        state: PopState,
        queue_nums: Callable[[str], int],
        on_reset: Callable[[str, str, int], None],
    ) -> None:
        self.store = store
        self.state = state
        self.queue_nums = queue_nums
        self.on_reset = on_reset

    def apply_resets(self) -> int:
        """Apply the offset resets requested since the last look (oldest first)."""
        directory = self.store.root / RESETS_DIR
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
        except FileNotFoundError:
            return 0
        if not names:
            return 0
        done = 0
        with self.state.write() as db:
            for name in names:
                path = directory / name
                try:
                    req = json.loads(path.read_text())
                    group, topic = str(req["group"]), str(req["topic"])
                    offsets = {int(q): int(o) for q, o in req["offsets"].items()}
                except FileNotFoundError:
                    continue  # applied by another endpoint process
                except (OSError, ValueError, KeyError, TypeError, AttributeError):
                    log.warning("ignoring an unreadable offset reset request %s", path)
                    path.unlink(missing_ok=True)
                    continue
                n = self.queue_nums(topic)
                # A group's retry topic is read under one key per original
                # topic: the reset moves each of them.
                keys = self._retry_keys(db, group, topic) or [topic]
                for qid, off in offsets.items():
                    if not 0 <= qid < n:
                        continue
                    for k in keys:
                        self._reset_queue(db, group, k, qid, off)
                path.unlink(missing_ok=True)
                log.info("offset reset applied: %s@%s -> %s", group, topic, offsets)
                done += 1
        return done

    @staticmethod
    def _retry_keys(db: sqlite3.Connection, group: str, topic: str) -> list[str]:
        """The pop-state keys reading ``topic`` when it is ``group``'s retry
        topic (one per original topic read so far)."""
        if topic != RT.retry_topic(group):
            return []
        return [
            k
            for (k,) in db.execute(
                "SELECT DISTINCT topic FROM queues WHERE grp=?", (group,)
            )
            if RT.origin(k) is not None and RT.source(k) == topic
        ]

    def _reset_queue(
        self, db: sqlite3.Connection, group: str, key: str, qid: int, off: int
    ) -> None:
        db.execute(
            "DELETE FROM pending WHERE grp=? AND topic=? AND qid=?", (group, key, qid)
        )
        # committed -1: the next mirror commits the new offset
        db.execute(
            "INSERT INTO queues VALUES (?,?,?,?,-1) ON CONFLICT "
            "DO UPDATE SET cursor=excluded.cursor, committed=-1",
            (group, key, qid, off),
        )
        self.on_reset(group, key, qid)

    def mirror_offsets(self) -> None:
        """Commit each queue's low-water mark (oldest pending offset, else the
        cursor) to the store's consumer offsets, where the console reads lag."""
        if not self.state.is_open:
            return
        rows = self.state.db.execute(
            "SELECT q.grp, q.topic, q.qid, q.committed, "
            "coalesce((SELECT min(off) FROM pending p WHERE p.grp=q.grp "
            "AND p.topic=q.topic AND p.qid=q.qid), q.cursor) FROM queues q"
        ).fetchall()
        done = []
        # The keys reading a group's retry topic (one per original topic)
        # commit the lowest of their marks to the retry topic itself.
        retry: dict[tuple[str, str, int], int] = {}
        for group, topic, qid, committed, low in rows:
            if RT.is_retry_key(topic):
                k = (group, RT.source(topic), qid)
                retry[k] = min(low, retry.get(k, low))
                continue
            if low == committed:
                continue
            try:
                self.store.commit_offset(group, topic, qid, low)
            except Exception:  # noqa: BLE001 - best effort mirror
                continue
            done.append((low, group, topic, qid, committed))
        for (group, topic, qid), low in retry.items():
            try:
                if self.store.committed_offset(group, topic, qid) != low:
                    self.store.commit_offset(group, topic, qid, low)
            except Exception:  # noqa: BLE001 - best effort mirror
                continue
        if done:
            with self.state.write() as db:
                db.executemany(
                    "UPDATE queues SET committed=? WHERE grp=? AND topic=? "
                    "AND qid=? AND committed=?",
                    done,
                )
