"""Epochs: which master wrote which part of the log (RocketMQ 5 ``EpochFileCache``).

``config/epochs.json`` is a list of ``{"epoch": n, "start": offset, "id": hex}``
(oldest first): epoch ``n`` began at log offset ``start``, the log end of the
store that became master then; it lasts until the next entry's start (or the
log's end). ``id`` is random, so two stores that open "epoch 1 at 0" on
their own do not take each other's history for theirs.

A store opens a new epoch (highest number it knows + 1, at its log end) when
it is promoted and each time it starts serving as a master (``HAServer.start``:
the first time that is epoch 1 at its current log end, 0 for an empty store;
a master that came back shorter than it was thus starts a new epoch where its
log now ends). A slave never opens one: it keeps the master's entries that
start at or before its own log end (``SlaveFollower``).

On connect the slave sends its list; ``consistent_end`` is where the two logs
stop being the same: the last entry both lists hold (same number, start and
id) tells who wrote the log up to there, and the smaller of where that epoch
ends in each log is the last offset both have from that writer. A slave whose
log goes beyond it is cut back there (``master.HAServer``). Without a shared
entry (a store from before epochs, or another history) the fingerprint checks
decide as they did before.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker_core.metadata import atomic_write_json

if TYPE_CHECKING:
    from broker_core.shared import SharedState

log = logging.getLogger(__name__)

EPOCH_FILE = "epochs.json"


@dataclass(frozen=True)
class Epoch:
    epoch: int
    start: int
    id: str
    #: What opened it (``"master"``, or ``"promoted:<role since ms>"``): lets the
    #: two processes that may finish one promotion open its epoch once.
    cause: str = field(default="", compare=False)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"epoch": self.epoch, "start": self.start, "id": self.id}
        if self.cause:
            out["cause"] = self.cause
        return out


def parse_epochs(obj: Any) -> list[Epoch] | None:
    """Return the entries of ``obj`` (the file's or a peer's JSON), or None if
    it is not a well-formed list (numbers rising, starts not falling)."""
    if not isinstance(obj, list):
        return None
    out: list[Epoch] = []
    for e in obj:
        if not isinstance(e, dict):
            return None
        n, start, ident = e.get("epoch"), e.get("start"), e.get("id")
        if not (
            isinstance(n, int)
            and isinstance(start, int)
            and isinstance(ident, str)
            and start >= 0
        ):
            return None
        if out and (n <= out[-1].epoch or start < out[-1].start):
            return None
        out.append(Epoch(n, start, ident, str(e.get("cause", ""))))
    return out


def _path(root: str | Path) -> Path:
    return Path(root) / "config" / EPOCH_FILE


def read_epochs(root: str | Path) -> list[Epoch]:
    """Return the store's epochs ([] without the file, or if it is damaged)."""
    try:
        obj = json.loads(_path(root).read_bytes())
    except FileNotFoundError:
        return []
    except ValueError:
        log.warning("%s is not JSON: taken as no epochs", _path(root))
        return []
    eps = parse_epochs(obj)
    if eps is None:
        log.warning("%s is malformed: taken as no epochs", _path(root))
        return []
    return eps


def write_epochs(root: str | Path, epochs: Sequence[Epoch]) -> None:
    atomic_write_json(_path(root), [e.as_dict() for e in epochs])


def begin_epoch(state: SharedState, root: str | Path, cause: str) -> Epoch:
    """Open a new epoch at the log end (under the append lock); return it.

    Entries that start past the log end are dropped first (the log lost what
    they described). A promotion's ``cause`` is ``"promoted:<since>"``: if the
    newest entry has it already (another process finished the same promotion)
    that entry is returned as it is.
    """
    with state.append_lock:
        end = state.commit_pos
        eps = read_epochs(root)
        if eps and cause.startswith("promoted") and eps[-1].cause == cause:
            return eps[-1]
        highest = eps[-1].epoch if eps else 0
        kept = [e for e in eps if e.start <= end]
        new = Epoch(highest + 1, end, secrets.token_hex(8), cause)
        write_epochs(root, [*kept, new])
    log.warning("epoch %d begins at log offset %d (%s)", new.epoch, end, cause)
    return new


def truncate_epochs(root: str | Path, end: int) -> None:
    """Drop the entries that start past ``end`` (the log was cut there)."""
    eps = read_epochs(root)
    kept = [e for e in eps if e.start <= end]
    if len(kept) != len(eps):
        write_epochs(root, kept)


def epoch_end(epochs: Sequence[Epoch], i: int, log_end: int) -> int:
    """Where epoch ``epochs[i]`` ends in a log that ends at ``log_end``."""
    nxt = epochs[i + 1].start if i + 1 < len(epochs) else log_end
    return min(nxt, log_end)


def consistent_end(
    master: Sequence[Epoch], master_end: int, slave: Sequence[Epoch], slave_end: int
) -> int | None:
    """Return the log offset up to which both logs are the same writer's, by
    their epochs (None: they share no epoch, the epochs cannot tell)."""
    index = {e: i for i, e in enumerate(master)}
    for j in range(len(slave) - 1, -1, -1):
        i = index.get(slave[j])
        if i is not None:
            return min(epoch_end(master, i, master_end), epoch_end(slave, j, slave_end))
    return None
