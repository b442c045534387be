"""Store configuration: every ``**config`` key of ``Broker.open``."""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_core.errors import ValidationError

log = logging.getLogger(__name__)

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
#: RocketMQ 5 ``MessageStoreConfig.timerMaxDelaySec``: 3 days.
DEFAULT_TIMER_MAX_DELAY_S = 3 * 86_400
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> list[int]:
    """Parse ``messageDelayLevel``: level k+1 is token k; returns delays in ms.

    Raises ``ValidationError`` on an empty token, unknown unit or bad number, as
    RocketMQ's ``parseDelayLevel`` fails the load.
    """
    out = []
    for token in text.split(" "):
        unit = _UNIT_MS.get(token[-1:]) if token else None
        if unit is None or not token[:-1].isdigit():
            raise ValidationError(f"bad delay level token {token!r} in {text!r}")
        out.append(int(token[:-1]) * unit)
    return out


@dataclass(slots=True)
class StoreConfig:
    """Settings of one open store; unknown keys are rejected by ``from_kwargs``."""

    #: "async": a background flusher writes the log every ``flush_interval_ms``;
    #: "sync": a send returns once its bytes are on disk (group commit).
    flush: str = "async"
    flush_interval_ms: int = 500
    #: A sync send waits at most this long for its flush (then FLUSH_DISK_TIMEOUT).
    sync_flush_timeout_ms: int = 5000
    #: Sync mode: how long a flush leader may wait for puts already under way
    #: to append, so that they share its fsync.
    group_commit_wait_us: int = 2000
    segment_size: int = 1 << 30
    #: Consume-queue units per consume-queue file (RocketMQ: 300,000 = 6,000,000 B).
    cq_units_per_file: int = 300_000
    index_slots: int = 5_000_000
    index_entries: int = 20_000_000
    #: Build the index from the flusher thread; False leaves it to queries.
    index_in_background: bool = True
    max_message_size: int = 4 * 1024 * 1024
    max_properties_size: int = 32 * 1024
    auto_create_topic: bool = True
    default_queue_nums: int = 4
    store_host: str = "127.0.0.1:10911"
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    #: A timer message (``TIMER_DELIVER_MS``, ``TIMER_DELAY_SEC``/``_MS``, the
    #: gRPC delivery timestamp) may be due at most this many seconds ahead;
    #: later ones are refused (``InvalidDelayError``). RocketMQ 5's
    #: ``timerMaxDelaySec`` (3 days); delay levels are not bound by it.
    timer_max_delay_s: int = DEFAULT_TIMER_MAX_DELAY_S
    #: Normal recovery CRC-checks at most this many bytes at the log's tail.
    recover_verify_max_bytes: int = 4 * 1024 * 1024
    #: Appends are refused (``StorageFullError``) while the store's filesystem
    #: is fuller than this (RocketMQ ``diskSpaceWarningLevelRatio``); 1.0: off.
    disk_space_warning_ratio: float = 0.90
    #: How often the disk usage is looked up on the append path.
    disk_check_interval_ms: int = 100
    #: Consumer offsets are kept in memory and written at most this often
    #: (and at close); a crash may redeliver what was consumed in this window.
    offset_persist_interval_ms: int = 1000
    #: Abnormal recovery re-verifies from this many bytes before the flushed
    #: position of the checkpoint.
    recover_margin_bytes: int = 1024 * 1024
    #: Recovery CRC-checks the whole log on open (``verify --repair``).
    verify_on_open: bool = False
    #: Background scrubber: CRC-check the whole log every this many seconds
    #: (0: off), reading at most ``scrub_bytes_per_s``.
    scrub_interval_s: int = 0
    scrub_bytes_per_s: int = 64 * 1024 * 1024
    delay_levels_ms: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.flush not in ("async", "sync"):
            raise ValidationError(
                f"flush must be 'async' or 'sync', not {self.flush!r}"
            )
        if self.segment_size < 4096:
            raise ValidationError("segment_size must be at least 4096")
        if self.default_queue_nums < 1:
            raise ValidationError("default_queue_nums must be at least 1")
        if self.timer_max_delay_s < 1:
            raise ValidationError("timer_max_delay_s must be at least 1")
        self.delay_levels_ms = parse_delay_levels(self.message_delay_level)

    @classmethod
    def from_kwargs(cls, flush: str = "async", **config: object) -> StoreConfig:
        """Build a config; raise ``ValidationError`` for an unknown key."""
        names = {f.name for f in dataclasses.fields(cls)} - {"delay_levels_ms"}
        unknown = set(config) - names
        if unknown:
            raise ValidationError(f"unknown store settings: {sorted(unknown)}")
        return cls(flush=flush, **config)  # type: ignore[arg-type]

    def delay_ms(self, level: int) -> int:
        """Return the delay of ``level`` (1-based), capped at the highest level."""
        levels = self.delay_levels_ms
        if level < 1:
            return 0
        return levels[min(level, len(levels)) - 1]


#: Settings that fix the size of a store's files: kept in ``config/store.json``.
GEOMETRY_KEYS = ("segment_size", "cq_units_per_file", "index_slots", "index_entries")


def store_geometry(config: StoreConfig) -> dict[str, int]:
    """Return the file-size settings of ``config`` (see ``GEOMETRY_KEYS``)."""
    return {k: int(getattr(config, k)) for k in GEOMETRY_KEYS}


#: A consume-queue unit's size in bytes (see ``consumequeue.UNIT``).
_CQ_UNIT_BYTES = 20
_DIGITS20 = "[0-9]" * 20


def _sizes_from_files(root: Path) -> dict[str, int]:
    """Infer the file sizes of a store whose ``config/store.json`` is missing.

    Segment files are named by their first byte's offset, so the step between
    names is the segment size even where a file was truncated; one file alone
    tells by its length (files are created at full size).
    """
    out: dict[str, int] = {}
    names = sorted((root / "commitlog").glob(_DIGITS20))
    steps = Counter(
        int(b.name) - int(a.name) for a, b in zip(names, names[1:], strict=False)
    )
    if steps:
        out["segment_size"] = steps.most_common(1)[0][0]
    elif names:
        out["segment_size"] = names[0].stat().st_size
    cq = sorted((root / "consumequeue").glob("*/*/" + _DIGITS20))
    if cq:
        out["cq_units_per_file"] = max(1, cq[0].stat().st_size // _CQ_UNIT_BYTES)
    return out


def _store_json(root: Path) -> dict[str, Any] | None:
    """``config/store.json`` of the store at ``root``; None if unreadable."""
    try:
        raw = json.loads((root / "config" / "store.json").read_bytes())
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None


def saved_geometry(root: str | Path) -> dict[str, int]:
    """Return the file sizes a store at ``root`` was created with.

    ``config/store.json`` if it is readable, else what the files show; empty
    for a new store.
    """
    root = Path(root)
    try:
        saved = {k: int((_store_json(root) or {})[k]) for k in GEOMETRY_KEYS}
    except (ValueError, KeyError, TypeError):
        return _sizes_from_files(root)
    files = _files_segment_size(root, saved["segment_size"])
    if files is not None:
        # The segment files are named by offset and created at full size:
        # they tell the size they were written with. A damaged store.json
        # (one digit changed) would otherwise read every record at the wrong
        # place: 91% were lost.
        log.error(
            "config/store.json says segment_size=%d but the segment files were "
            "written with %d: opening with %d (verify --repair writes it back)",
            saved["segment_size"],
            files,
            files,
        )
        saved["segment_size"] = files
    return saved


def _files_segment_size(root: Path, claimed: int) -> int | None:
    """The segment size the commit log's files show when it is not
    ``claimed``; None when the files agree with it (every file named at a
    multiple of it, none longer) or tell nothing better."""
    paths = sorted((root / "commitlog").glob(_DIGITS20))
    bases = [int(p.name) for p in paths]
    if not bases:
        return None
    try:
        longest = max(p.stat().st_size for p in paths)
    except OSError:
        return None
    if claimed > 0 and all(b % claimed == 0 for b in bases) and longest <= claimed:
        return None
    # Files are created at full size (truncation only shortens them): the
    # longest is the size, if every name is a multiple of it.
    if longest > 0 and all(b % longest == 0 for b in bases):
        return longest
    return None


def geometry_conflict(root: str | Path) -> str | None:
    """Why ``config/store.json`` disagrees with the store's files, or None."""
    root = Path(root)
    try:
        size = int((_store_json(root) or {})["segment_size"])
    except (ValueError, KeyError, TypeError):
        return None
    files = _files_segment_size(root, size)
    if files is None:
        return None
    return (
        f"config/store.json says segment_size={size} but the segment files were "
        f"written with {files} (the files win; verify --repair writes it back)"
    )


def adopt_geometry(root: str | Path, config: StoreConfig) -> None:
    """Give ``config`` the file sizes of the store at ``root``; refuse a conflict.

    A store's files are laid out by the sizes it was created with: opening it
    with others would read records at the wrong offsets, so its own sizes win
    over a caller's defaults, and a caller's explicit, different size is an
    error rather than a silent change.
    """
    defaults = StoreConfig()
    for key, saved in saved_geometry(root).items():
        wanted = getattr(config, key)
        if wanted == saved:
            continue
        if wanted != getattr(defaults, key):
            raise ValidationError(
                f"the store at {root} was created with {key}={saved}; "
                f"it cannot be opened with {key}={wanted} (leave {key} unset "
                "to use the store's own)"
            )
        setattr(config, key, saved)


def store_id(root: str | Path) -> str | None:
    """Return the id written into ``config/store.json`` when the store was
    created (None for a store without one): tells a store from another placed
    at the same path."""
    value = (_store_json(Path(root)) or {}).get("store_id")
    return None if value is None else str(value)


def new_store_id() -> str:
    """Return a fresh store id."""
    return uuid.uuid4().hex
