"""The parts of an open store that recovery, flushing and scrubbing work on.

``MessageStore`` owns them and hands this bundle to its collaborators, so they
depend on the parts, not on the store (no import circle between them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from broker_core.commitlog import CommitLog
from broker_core.config import StoreConfig
from broker_core.consumequeue import ConsumeQueueTable
from broker_core.index import IndexService
from broker_core.metadata import TopicTable
from broker_core.quarantine import Quarantine
from broker_core.shared import SharedState


@dataclass(frozen=True, slots=True)
class StoreParts:
    """The files of one open store and what is known about them."""

    root: Path
    config: StoreConfig
    state: SharedState
    commitlog: CommitLog
    cqs: ConsumeQueueTable
    index: IndexService
    quarantine: Quarantine
    topics: TopicTable
