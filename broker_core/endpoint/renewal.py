"""Auto-renewal of in-flight pop entries (push consumers, G7): a handle handed
to a client that asked for it stays valid while the client is alive, up to a
limit, by pushing its entry's invisibility forward before it runs out.

Renewals belong to the process whose client asked for them (they are not in
``pop.db``): another process that acknowledges, renews or redelivers the
entry changes its nonce, and the next round drops the renewal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from broker_core.endpoint import retrytopic as RT
from broker_core.endpoint.popstate import PopState, now_ms

#: (group, pop-state key, queue, offset)
Key = tuple[str, str, int, int]


class Delivery(Protocol):
    offset: int
    nonce: int


class Renewals:
    """The auto-renewed entries of one process over ``state``."""

    def __init__(self, state: PopState) -> None:
        self.state = state
        #: key -> (client id, invisible ms, renew until ms, nonce)
        self.entries: dict[Key, tuple[str, int, int, int]] = {}

    def __bool__(self) -> bool:
        return bool(self.entries)

    def add(
        self,
        group: str,
        topic: str,
        got: Iterable[tuple[int, Delivery]],
        client_id: str,
        invisible_ms: int,
        max_renew_ms: int,
    ) -> None:
        """Renew ``got`` (queue id, delivery) of ``group`` on ``topic`` for
        ``client_id``: ``invisible_ms`` at a time, for ``max_renew_ms``."""
        until = now_ms() + max_renew_ms
        for qid, e in got:
            key = RT.key_for(group, topic, e.nonce)
            self.entries[(group, key, qid, e.offset)] = (
                client_id,
                invisible_ms,
                until,
                e.nonce,
            )

    def drop(self, key: Key) -> None:
        self.entries.pop(key, None)

    def drop_queue(self, group: str, key: str, qid: int) -> None:
        for k in [k for k in self.entries if k[:3] == (group, key, qid)]:
            del self.entries[k]

    def clear(self) -> None:
        self.entries.clear()

    def renew_due(self, alive: set[str]) -> int:
        """Extend the invisibility of auto-renew entries of live clients whose
        deadline is near (keeps their handles valid); drop the others (gone,
        acknowledged or delivered again by any process, client offline)."""
        now = now_ms()
        n = 0
        with self.state.write() as db:
            for key, (cid, inv, until, nonce) in list(self.entries.items()):
                row = db.execute(
                    "SELECT visible_at FROM pending WHERE grp=? AND topic=? "
                    "AND qid=? AND off=? AND nonce=?",
                    (*key, nonce),
                ).fetchone()
                if row is None or cid not in alive or now >= until or row[0] <= now:
                    del self.entries[key]
                    continue
                if row[0] - now < min(10_000, inv // 2):
                    db.execute(
                        "UPDATE pending SET visible_at=? WHERE grp=? AND topic=? "
                        "AND qid=? AND off=? AND nonce=?",
                        (now + inv, *key, nonce),
                    )
                    n += 1
        return n
