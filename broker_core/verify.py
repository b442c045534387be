"""``python -m broker_core verify``: check every byte a store depends on.

Read-only by default (no lock is taken, nothing is changed, the files are
mapped for reading, so it works on a full disk and beside a running broker):
every record of every segment with its CRCs, every consume-queue unit against
the record it points at and every record against its unit, the index files,
the configuration files and the checkpoint. ``--repair`` opens the store alone,
quarantines damaged ranges, rebuilds what disagrees with the log, and checks
again.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from broker_core import sqlite_wal
from broker_core.checkpoint import abort_exists, checkpoint_damage, read_checkpoint
from broker_core.commitlog import CommitLog, Damage
from broker_core.config import StoreConfig, geometry_conflict, saved_geometry
from broker_core.consumequeue import UNIT_SIZE, ConsumeQueue
from broker_core.dispatch import (
    SCHEDULE_TOPIC,
    decode_dispatch,
    index_keys,
    iter_index_keys,
)
from broker_core.errors import ConfigFileError, RepairRefusedError
from broker_core.metadata import (
    OffsetTable,
    TopicTable,
    atomic_write_json,
    backup_path,
)
from broker_core.quarantine import Quarantine
from broker_core.record import intact, names_queue_record
from broker_core.shared import read_commit_pos, state_damage

log = logging.getLogger(__name__)


@dataclass
class VerifyReport:
    """What ``verify_store`` found; ``ok`` is False if anything is wrong."""

    store_dir: str
    clean_shutdown: bool
    records: int = 0
    log_end: int = 0
    #: Damaged ranges not yet in quarantine: ``{"start", "end", "reason"}``.
    damaged: list[dict[str, Any]] = field(default_factory=list)
    #: Ranges already quarantined (``quarantine/ranges.jsonl``).
    quarantined: list[dict[str, Any]] = field(default_factory=list)
    #: Problems with consume queues, index, config and checkpoint, in words.
    problems: list[str] = field(default_factory=list)
    #: Notes that are not faults (e.g. fallbacks used).
    notes: list[str] = field(default_factory=list)
    queues_checked: int = 0
    units_checked: int = 0
    #: Per queue (``topic/queue``), the units naming an intact record of
    #: theirs: the messages its consumers can read.
    reachable: dict[str, int] = field(default_factory=dict)
    repaired: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.damaged or self.quarantined or self.problems)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out


def _geometry(root: Path) -> dict[str, int]:
    """Return the store's file-size settings (``config.saved_geometry``)."""
    return saved_geometry(root) or {"segment_size": StoreConfig().segment_size}


def verify_store(root: Path, segment_size: int | None = None) -> VerifyReport:
    """Check the store at ``root`` without changing it; see the module docstring."""
    report = VerifyReport(str(root), not abort_exists(root))
    size = segment_size or _geometry(root)["segment_size"]
    _check_config(root, report)
    quarantine = Quarantine(root)
    report.quarantined = [asdict(r) for r in quarantine.ranges]
    log = CommitLog(root, size, readonly=True)
    expected: dict[tuple[str, int], dict[int, tuple[int, int, int]]] = {}
    delay_ms = StoreConfig().delay_ms
    try:  # (its deleted topics' records have no units)
        topics: TopicTable | None = TopicTable(root / "config" / "topics.json")
    except ConfigFileError:  # reported by _check_config
        topics = None
    try:
        damage: list[Damage] = []
        cp = read_checkpoint(root / "checkpoint")
        first = log.first_offset()
        committed = max(read_commit_pos(root), cp.flushed_offset)
        keyed: list[tuple[str, int, int]] = []  # (topic#key, offset, time)
        for seg, pos, _size in log.scan(first, None, True, damage, committed):
            report.records += 1
            req = decode_dispatch(seg.view, pos, delay_ms)
            if req.takes_unit(topics):
                expected.setdefault((req.topic, req.queue_id), {})[
                    req.consume_queue_offset
                ] = (req.commit_log_offset, req.msg_size, req.tags_code)
            if req.commit_log_offset < cp.index_offset and req.sysflag & 0xC != 0xC:
                phys, ts, _flag, topic, keys = index_keys(seg.view, pos)
                keyed += [(f"{topic}#{k}", phys, ts) for k in keys]
        report.log_end = log.last_end
        for d in damage:
            if not quarantine.known(d.start):
                report.damaged.append(
                    {"start": d.start, "end": d.end, "reason": d.reason}
                )
        if report.log_end < cp.flushed_offset and not quarantine.known(report.log_end):
            report.problems.append(
                f"the log ends at {report.log_end} but the checkpoint says it was "
                f"flushed to {cp.flushed_offset}: "
                f"{cp.flushed_offset - report.log_end} bytes are missing"
            )
        why = state_damage(root, report.log_end) if report.clean_shutdown else None
        if why is not None:
            report.problems.append(
                f"the state file {why}: the next open sets it from the log; "
                "verify --repair rewrites it"
            )
        why = checkpoint_damage(root / "checkpoint")
        if why is not None:
            report.problems.append(
                f"the checkpoint: {why}: the next open checks and re-dispatches "
                "the whole log (slower, nothing lost); verify --repair rewrites it"
            )
        _check_queues(root, log, expected, report)
        _check_index(root, cp.index_offset, first, report)
        _check_index_entries(root, keyed, report)
        _check_sqlite(root, report)
        _check_state_table(root, report)
    finally:
        log.close()
    return report


def _check_config(root: Path, report: VerifyReport) -> None:
    conflict = geometry_conflict(root)
    if conflict is not None:
        report.problems.append(conflict)
    from broker_core.transaction.transports import read_checkers

    for path, read in (
        (root / "config" / "topics.json", TopicTable),
        (root / "config" / "consumerOffset.json", OffsetTable),
        (root / "transaction" / "checkers.json", read_checkers),
    ):
        try:
            json.loads(path.read_bytes())
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            try:
                read(path)
            except ConfigFileError as err:
                report.problems.append(str(err))
            else:
                report.problems.append(
                    f"{path.name} is damaged ({exc}); {backup_path(path).name} "
                    "is used instead (verify --repair writes it back)"
                )


def _check_queues(
    root: Path,
    log: CommitLog,
    expected: dict[tuple[str, int], dict[int, tuple[int, int, int]]],
    report: VerifyReport,
) -> None:
    base = root / "consumequeue"
    on_disk: set[tuple[str, int]] = set()
    if base.is_dir():
        for tdir in base.iterdir():
            if tdir.is_dir():
                on_disk |= {(tdir.name, int(q.name)) for q in tdir.iterdir()
                            if q.name.isdigit()}  # fmt: skip
    for topic, qid in sorted(on_disk | set(expected)):
        report.queues_checked += 1
        want = expected.get((topic, qid), {})
        qdir = base / topic / str(qid)
        files = sorted(qdir.glob("[0-9]" * 20)) if qdir.is_dir() else []
        if not files:
            if want:
                report.problems.append(
                    f"consume queue {topic}/{qid} is missing "
                    f"({len(want)} records in the log)"
                )
            continue
        per = files[0].stat().st_size // UNIT_SIZE
        short = [f.name for f in files if f.stat().st_size != per * UNIT_SIZE]
        if short:
            report.problems.append(
                f"consume queue {topic}/{qid}: files cut short: {short}"
            )
            continue
        cq = ConsumeQueue(root, topic, qid, per)
        cq.segments.readonly = True
        try:
            _check_units(cq, log, want, report)
        finally:
            cq.close()


def _check_units(
    cq: ConsumeQueue,
    log: CommitLog,
    want: dict[int, tuple[int, int, int]],
    report: VerifyReport,
) -> None:
    """Each unit names its record (offset, size) with its tag hash: a wrong
    hash makes a tag subscription skip the message or take another's."""
    name = f"{cq.topic}/{cq.queue_id}"
    lo, hi = cq.min_offset(), cq.max_offset()
    top = max(want) + 1 if want else lo
    if hi < top:
        report.problems.append(
            f"consume queue {name} ends at {hi} but the log has records up to "
            f"queue offset {top - 1}: {top - hi} messages unreachable"
        )
    bad = missing = reachable = hidden = unexplained = 0
    # Where the log itself says records are damaged or gone.
    known = [(d["start"], d["end"]) for d in report.damaged] + [
        (q["offset"], q["offset"] + max(q["length"], 1)) for q in report.quarantined
    ]

    def explained(phys: int) -> bool:
        return any(a <= phys and (b < 0 or phys < b) for a, b in known)

    off = lo
    while off < hi:
        units = cq.read_units(off, 4096)
        if not units:
            break
        for i, (phys, size, code) in enumerate(units):
            q = off + i
            report.units_checked += 1
            target = want.get(q)
            if size == 1:
                # A placeholder for a damaged or missing record; the log having
                # that record whole (a segment back in place) means it hides
                # the message.
                if target is not None:
                    hidden += 1
                continue
            # The schedule topic's tag field is a due time, from the store's
            # own delay levels: only its offset and size are compared.
            if target is not None and (
                target[:2] != (phys, size)
                or (cq.topic != SCHEDULE_TOPIC and target[2] != code)
            ):
                bad += 1
                continue
            seg = log.segments.segment(phys)
            if seg is None:
                # No retention deletes segments: the one it names is gone.
                missing += 1
            elif not intact(seg.view, phys - seg.base, size, phys):
                # A damaged record is reported with the log; its unit is fine.
                # One the log does not report (a blank marker or zeros laid
                # over records end a segment early): its message is lost.
                if target is not None:
                    bad += 1
                elif not explained(phys):
                    unexplained += 1
            elif names_queue_record(
                seg.view, phys - seg.base, size, phys, cq.queue_id, q
            ):
                reachable += 1
        off += len(units)
    report.reachable[name] = reachable
    if bad:
        report.problems.append(
            f"consume queue {name}: {bad} units do not point at their records"
        )
    if unexplained:
        report.problems.append(
            f"consume queue {name}: {unexplained} units name no record where "
            "the log reports no damage: the log lost their messages (a "
            "segment cut short by an end marker or zeros over its records?)"
        )
    if hidden:
        report.problems.append(
            f"consume queue {name}: {hidden} placeholder units stand for records "
            "the log has whole: those messages are hidden (verify --repair "
            "rebuilds the queue)"
        )
    if missing:
        report.problems.append(
            f"consume queue {name}: {missing} units point into log segments "
            "that do not exist (deleted or lost): their messages are gone"
        )


def _check_index(root: Path, indexed: int, first: int, report: VerifyReport) -> None:
    idx = root / "index"
    files = [p for p in idx.iterdir() if p.name.isdigit()] if idx.is_dir() else []
    if indexed > first and not files:
        report.problems.append(
            f"the checkpoint says the index covers the log up to {indexed} "
            "but index/ has no files (reopening the store rebuilds it)"
        )


def _index_files(root: Path, readonly: bool = True) -> list[Any]:
    """The store's index files, newest first, mapped as its geometry says."""
    from broker_core.index import IndexFile

    defaults = StoreConfig()
    geometry = {
        "index_slots": defaults.index_slots,
        "index_entries": defaults.index_entries,
        **saved_geometry(root),
    }
    idx = root / "index"
    names = (
        sorted(p.name for p in idx.iterdir() if p.name.isdigit())
        if idx.is_dir()
        else []
    )
    return [
        IndexFile(idx / n, geometry["index_slots"], geometry["index_entries"], readonly)
        for n in reversed(names)
    ]


def index_disagreements(root: Path, keyed: list[tuple[str, int, int]]) -> list[str]:
    """The records whose keys the index does not find (``keyed``: ``(topic#key,
    log offset, store time)`` of every indexed record), in words, at most 5,
    with the count; [] if the index finds every one. Read-only."""
    files = _index_files(root)
    try:
        short = [f.path.name for f in files if f.short]
        missing = 0
        examples: list[str] = []
        for key, phys, ts in keyed:
            if not any(phys in f.query(key, ts, ts, 1 << 20) for f in files):
                missing += 1
                if len(examples) < 5:
                    examples.append(f"{key} at {phys}")
        out = [f"index file {n} is shorter than its size" for n in short]
        if missing:
            out.append(
                f"the index does not find {missing} of {len(keyed)} keys "
                f"(e.g. {', '.join(examples)}): `verify --repair` rebuilds it "
                "from the log"
            )
        return out
    finally:
        for f in files:
            f.close()


def _check_index_entries(
    root: Path, keyed: list[tuple[str, int, int]], report: VerifyReport
) -> None:
    report.problems += index_disagreements(root, keyed)


def state_table_damage(root: Path) -> str | None:
    """What is wrong with the transaction state table (read-only): another
    version, or entries written that fail their CRC or are gone."""
    import struct

    from broker_core.transaction import statetable as S

    sdir = root / "transaction" / "state"
    head = struct.Struct("@qqqq")
    try:
        header = (sdir / "header").read_bytes()[: head.size]
    except FileNotFoundError:
        return None
    if len(header) < head.size:
        return "its header is cut short"
    magic, _applied, version, high = head.unpack(header)
    if magic != S._MAGIC or version != S._VERSION:
        return f"its header says version {version} (magic {magic:#x})"
    bad = 0
    for base in range(0, high, S.ENTRIES_PER_FILE):
        n = min(S.ENTRIES_PER_FILE, high - base)
        try:
            data = (sdir / f"{base:020d}").read_bytes()[: n * S.ENTRY_SIZE]
        except FileNotFoundError:
            bad += n
            continue
        have = len(data) // S.ENTRY_SIZE
        bad += n - have + S.count_damaged(data[: have * S.ENTRY_SIZE])
    return f"{bad} entries fail their CRC or are gone" if bad else None


def _check_state_table(root: Path, report: VerifyReport) -> None:
    why = state_table_damage(root)
    if why is not None:
        report.problems.append(
            f"the transaction state table: {why}: derived from the log, it is "
            "folded again when the transaction service next opens"
        )


def _check_sqlite(root: Path, report: VerifyReport) -> None:
    for rel, cost in sqlite_wal.SET_ASIDE_COST.items():
        why = sqlite_wal.damage(root / rel)
        if why is not None:
            report.problems.append(
                f"{rel} is damaged ({why}): {cost}; "
                "`verify --repair` sets it aside and it is rebuilt"
            )


def _indexed_keys(store: Any) -> list[tuple[str, int, int]]:
    """``(topic#key, offset, time)`` of every record the open ``store`` has
    indexed (its log up to ``indexed_pos``; rolled-back halves are not)."""
    clog = store.commitlog
    return [
        (f"{topic}#{k}", phys, ts)
        for phys, _size, ts, topic, keys in iter_index_keys(
            clog, clog.first_offset(), store.state.indexed_pos
        )
        for k in keys
    ]


#: What ``repair_store`` may rewrite besides the log, relative to the store:
#: kept in ``repair-backup/`` while it works and put back if it fails its proof.
REWRITTEN = (
    "consumequeue",
    "index",
    "config",
    "transaction/state",
    "checkpoint",
    "state",
)
BACKUP_DIR = "repair-backup"


def repair_store(root: Path) -> dict[str, Any]:
    """``repair_and_verify``'s repair: what it did."""
    return repair_and_verify(root).repaired


def repair_and_verify(root: Path) -> VerifyReport:
    """Repair the store at ``root``, prove the repair lost nothing, and return
    the verification of the repaired store (its ``repaired``: what was done).

    The files the repair may rewrite (consume queues, index, configuration,
    transaction state table, checkpoint, state) are first copied to
    ``repair-backup/`` (sparse: only their written blocks). After the repair,
    every queue must make at least as many intact messages reachable as it
    did before; if one does not, the copies are put back and
    ``RepairRefusedError`` says which queues. The log itself is changed only
    where its checks fail (those bytes are copied to ``quarantine/`` first) and
    past the committed position.

    Raises ``StoreError`` if another process has the store open.
    """
    root = Path(root)
    before = verify_store(root)
    try:
        backup = _backup(root)
    except (OSError, shutil.Error) as exc:
        shutil.rmtree(root / BACKUP_DIR, ignore_errors=True)
        from broker_core.errors import StoreError

        raise StoreError(
            "verify --repair first copies the files it may rewrite (queues, "
            f"index, config, state) to {BACKUP_DIR}/, and could not: {exc}. "
            "Free some space on the store's disk and run it again; nothing "
            "was changed"
        ) from None
    try:
        result = _repair(root)
    except BaseException:
        _restore(root, backup)
        raise
    after = verify_store(root)
    lost = {
        q: n - after.reachable.get(q, 0)
        for q, n in before.reachable.items()
        if after.reachable.get(q, 0) < n
    }
    if lost:
        _restore(root, backup)
        worst = sorted(lost.items(), key=lambda kv: -kv[1])[:5]
        where = ", ".join(f"{q}: {n}" for q, n in worst)
        raise RepairRefusedError(
            f"the repair would have made {sum(lost.values())} messages "
            f"unreachable that were reachable before it ({where}); the files it "
            "rewrote are back as they were: keep a copy of the store and report this"
        )
    shutil.rmtree(backup, ignore_errors=True)
    result["reachable_before"] = sum(before.reachable.values())
    result["reachable_after"] = sum(after.reachable.values())
    after.repaired = result
    return after


def _copy_sparse(src: str | Path, dst: str | Path) -> None:
    """Copy ``src`` to ``dst`` writing only its non-zero blocks (queue and
    index files are mostly unwritten: a plain copy would fill the disk)."""
    block = 1 << 16
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while chunk := fin.read(block):
            if chunk.count(0) == len(chunk):
                fout.seek(len(chunk), os.SEEK_CUR)
            else:
                fout.write(chunk)
        fout.truncate(fin.tell())
        fout.flush()
        os.fsync(fout.fileno())


def _backup(root: Path) -> Path:
    """Copy what the repair may rewrite into a fresh ``repair-backup/``."""
    backup = root / BACKUP_DIR
    shutil.rmtree(backup, ignore_errors=True)
    backup.mkdir()
    for rel in REWRITTEN:
        src = root / rel
        if src.is_dir():
            shutil.copytree(src, backup / rel, copy_function=_copy_sparse)
        elif src.is_file():
            (backup / rel).parent.mkdir(parents=True, exist_ok=True)
            _copy_sparse(src, backup / rel)
    return backup


def _restore(root: Path, backup: Path) -> None:
    """Put back what ``_backup`` copied (the store is closed)."""
    for rel in REWRITTEN:
        kept, live = backup / rel, root / rel
        if not kept.exists():
            continue
        if live.is_dir():
            shutil.rmtree(live)
        elif live.exists():
            live.unlink()
        live.parent.mkdir(parents=True, exist_ok=True)
        os.replace(kept, live)
    shutil.rmtree(backup, ignore_errors=True)
    log.error("repair undone: the files it rewrote are back as they were")


def _repair(root: Path) -> dict[str, Any]:
    """Open the store alone, CRC-check all of it, quarantine and rebuild.

    Raises ``StoreError`` if another process has the store open.
    """
    from broker_core.errors import StoreError
    from broker_core.recovery import check_queues
    from broker_core.store import MessageStore

    settings: dict[str, Any] = {**_geometry(root), "verify_on_open": True}
    config = StoreConfig.from_kwargs(**settings)
    store = MessageStore(root, config)
    try:
        info = store.recovery_info
        if info is None:
            raise StoreError(
                f"{root} is open in another process: stop the broker's processes "
                "(endpoint, console, Celery) and run verify --repair again"
            )
        with store.state.append_lock:
            rebuilt = check_queues(store.parts, store.state.commit_pos, thorough=True)
        store.build_index()
        index_rebuilt = info.index_rebuilt
        if index_disagreements(root, _indexed_keys(store)):
            log.warning("the index disagrees with the log: rebuilding it")
            store.rebuild_index()
            index_rebuilt = True
        state_reset = False
        why = state_table_damage(root)
        if why is not None:
            from broker_core.transaction.statetable import StateTable

            log.warning("the transaction state table: %s: resetting it", why)
            table = StateTable(root)
            try:
                table.reset()  # folded again from the log at the next open
            finally:
                table.close()
            state_reset = True
        set_aside_sqlite = []
        for rel, cost in sqlite_wal.SET_ASIDE_COST.items():
            why = sqlite_wal.damage(root / rel)
            if why is not None:
                log.warning("%s is damaged (%s): set aside (%s)", rel, why, cost)
                sqlite_wal.set_aside(root / rel)
                set_aside_sqlite.append(str(rel))
        store.topics.persist()
        store.offsets.persist()
        checkers = root / "transaction" / "checkers.json"
        try:
            json.loads(checkers.read_bytes())
        except FileNotFoundError:
            pass
        except (OSError, ValueError):
            from broker_core.transaction.transports import read_checkers

            groups = read_checkers(checkers)  # the backup's, or ConfigFileError
            atomic_write_json(checkers, {"groups": groups})
            os.chmod(checkers, 0o600)
        if geometry_conflict(root) is not None:
            from broker_core.config import store_geometry

            path = root / "config" / "store.json"
            atomic_write_json(
                path,
                {**json.loads(path.read_bytes()), **store_geometry(store.config)},
            )
        return {
            "quarantined": [asdict(r) for r in info.quarantined],
            "rebuilt_queues": [f"{t}/{q}" for t, q in info.rebuilt_queues + rebuilt],
            "index_rebuilt": index_rebuilt,
            "sqlite_set_aside": set_aside_sqlite,
            "state_table_reset": state_reset,
            "log_end": info.log_end,
            "missing_bytes": info.missing_bytes,
        }
    finally:
        store.close()


def print_report(r: VerifyReport) -> None:
    """Print ``r`` for a person."""
    print(f"store {r.store_dir}  clean shutdown: {r.clean_shutdown}")
    print(f"records: {r.records} whole, log ends at {r.log_end}")
    print(f"consume queues: {r.queues_checked} checked, {r.units_checked} units")
    if r.repaired:
        print("repaired:")
        for k, v in r.repaired.items():
            print(f"  {k}: {v}")
    for d in r.damaged:
        end = "the end of the data" if d["end"] < 0 else d["end"]
        print(f"DAMAGED  log bytes {d['start']} .. {end} ({d['reason']})")
    for q in r.quarantined:
        print(
            f"QUARANTINED  log bytes {q['offset']} .. {q['offset'] + q['length']} "
            f"({q['reason']}; {q['action']}; copy in quarantine/{q['offset']:020d}.bin)"
        )
    for p in r.problems:
        print(f"PROBLEM  {p}")
    for n in r.notes:
        print(f"note  {n}")
    print("OK" if r.ok else "NOT OK")
