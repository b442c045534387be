"""The message index on its own: Java key hashes, slots, chains, files."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest

from broker_core.index import (
    ENTRY,
    ENTRY_SIZE,
    HEADER,
    HEADER_SIZE,
    IndexFile,
    IndexService,
    KeyHasher,
    key_hash,
)

TS = 1_700_000_000_000


def java_hash(text: str) -> int:
    """Java's ``String.hashCode()``, written out here from its definition."""
    raw = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(raw), 2):
        h = (31 * h + int.from_bytes(raw[i : i + 2], "big")) % 2**32
    return h - 2**32 if h >= 2**31 else h


def same_slot_keys(slots: int, n: int) -> list[str]:
    """``n`` keys whose hashes differ but fall into one slot."""
    by_slot: dict[int, list[str]] = {}
    for i in range(10_000):
        key = f"T#k{i}"
        group = by_slot.setdefault(key_hash(key) % slots, [])
        if all(key_hash(k) != key_hash(key) for k in group):
            group.append(key)
            if len(group) == n:
                return group
    raise AssertionError("no such keys")


def entry(f: IndexFile, idx: int) -> tuple[int, int, int, int]:
    at = HEADER_SIZE + f.slots * 4 + idx * ENTRY_SIZE
    return ENTRY.unpack_from(f.mm, at)  # type: ignore[return-value]


def entry_at(f: IndexFile, idx: int) -> int:
    return HEADER_SIZE + f.slots * 4 + idx * ENTRY_SIZE


def slot_at(f: IndexFile, key: str) -> int:
    return HEADER_SIZE + (key_hash(key) % f.slots) * 4


# -- hashes --------------------------------------------------------------------


def test_key_hash_is_the_absolute_java_hash() -> None:
    assert java_hash("abc") == 96354  # as Java prints it
    for key in ("abc", "T#order-1", "Hello World!", "日本語", "a😀b", ""):
        assert key_hash(key) == abs(java_hash(key)), key
    negative = next(k for k in (f"n{i}" * 5 for i in range(100)) if java_hash(k) < 0)
    assert key_hash(negative) == -java_hash(negative) > 0
    # Integer.MIN_VALUE has no absolute value in Java's int: it maps to 0.
    assert java_hash("polygenelubricants") == -(2**31)
    assert key_hash("polygenelubricants") == 0


@pytest.mark.parametrize(
    "topic", ["T", "TopicTest", "%RETRY%group", "话题", "t😀", "x" * 300]
)
def test_key_hasher_equals_hashing_the_whole_string(topic: str) -> None:
    hasher = KeyHasher()
    keys = ["", "k", "order-1", "Aa", "BB", "键", "😀", "a😀b😀", "z" * 200]
    for _ in range(2):  # the second round is served from the caches
        for key in keys:
            assert hasher(topic, key) == key_hash(f"{topic}#{key}"), (topic, key)


# -- one file ------------------------------------------------------------------


def test_header_counts_and_the_first_entry(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "i", slots=8, entries=16)
    assert f.size == HEADER_SIZE + 8 * 4 + 16 * ENTRY_SIZE
    # At least its geometry (the header's page of blocks may reach past a
    # file this small).
    assert os.path.getsize(tmp_path / "i") >= f.size
    assert f.header() == (0, 0, 0, 0, 0, 0)
    assert f.query("T#a", 0, 2**62, 10) == []
    assert f.put("T#a", 500, TS)
    assert f.put("T#b", 900, TS + 3_500)
    assert f.put("T#a", 700, TS + 2_000)
    # begin/end time, begin/end offset, slots in use, count (entry 0 unused).
    used = len({key_hash(k) % 8 for k in ("T#a", "T#b")})
    assert f.header() == (TS, TS + 3_500, 500, 900, used, 4)
    assert entry(f, 0) == (0, 0, 0, 0)
    assert entry(f, 1) == (key_hash("T#a"), 500, 0, 0)
    assert entry(f, 3) == (key_hash("T#a"), 700, 2, 1)  # seconds; chains to 1
    assert struct.unpack_from(">i", f.mm, slot_at(f, "T#a"))[0] == 3
    f.close()


def test_chain_is_newest_first_and_limit_keeps_the_newest(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "i", slots=8, entries=32)
    for i in range(10):
        assert f.put("T#key", 100 * i, TS + i)
        assert f.put("T#other", 100 * i + 1, TS + i)
    assert f.query("T#key", TS, TS + 10, 100) == [100 * i for i in range(9, -1, -1)]
    assert f.query("T#key", TS, TS + 10, 3) == [900, 800, 700]
    assert f.query("T#other", TS, TS + 10, 2) == [901, 801]
    assert f.query("T#absent", TS, TS + 10, 5) == []
    f.close()


def test_equal_java_hashes_are_both_returned(tmp_path: Path) -> None:
    """ "Aa" and "BB" have one Java hash: the index cannot tell them apart (the
    caller checks each message's keys), but neither may hide the other."""
    assert key_hash("T#Aa") == key_hash("T#BB")
    f = IndexFile(tmp_path / "i", slots=8, entries=16)
    f.put("T#Aa", 100, TS)
    f.put("T#BB", 200, TS)
    f.put("T#Aa", 300, TS)
    assert f.query("T#Aa", TS, TS, 10) == [300, 200, 100]
    assert f.query("T#BB", TS, TS, 10) == [300, 200, 100]
    f.close()


def test_keys_sharing_a_slot_keep_their_own_entries(tmp_path: Path) -> None:
    keys = same_slot_keys(8, 3)
    f = IndexFile(tmp_path / "i", slots=8, entries=32)
    for i in range(4):
        for j, key in enumerate(keys):
            f.put(key, 1000 * j + i, TS)
    for j, key in enumerate(keys):
        assert f.query(key, TS, TS, 10) == [1000 * j + i for i in (3, 2, 1, 0)]
        assert f.query(key, TS, TS, 2) == [1000 * j + 3, 1000 * j + 2]
    assert f.header()[4] == 1  # one slot in use
    # The slot holds the newest entry; every entry chains to the one before.
    newest = struct.unpack_from(">i", f.mm, slot_at(f, keys[0]))[0]
    assert newest == 12
    assert [entry(f, i)[3] for i in range(1, 13)] == list(range(0, 12))
    f.close()


def test_time_window_and_the_second_of_slack(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "i", slots=8, entries=16)
    f.put("T#k", 1, TS)
    f.put("T#k", 2, TS + 5_999)  # stored as 5 s after the file's begin
    f.put("T#k", 3, TS + 10_000)
    assert f.query("T#k", TS + 4_000, TS + 6_000, 10) == [2]
    assert f.query("T#k", TS + 5_999, TS + 5_999, 10) == [2]
    assert f.query("T#k", TS, TS + 10_000, 10) == [3, 2, 1]
    assert f.query("T#k", TS + 9_000, TS + 20_000, 10) == [3]
    assert f.query("T#k", TS + 11_001, TS + 99_000, 10) == []  # after the file
    assert f.query("T#k", 0, TS - 1, 10) == []  # before it
    f.close()


def test_a_full_file_refuses_more(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "i", slots=4, entries=4)  # entry 0 is never used
    assert [f.put(f"T#{i}", i, TS) for i in range(3)] == [True] * 3
    assert f.is_full()
    assert f.put("T#3", 3, TS) is False
    assert f.header()[5] == 4
    g = IndexFile(tmp_path / "j", slots=4, entries=4)
    items = [(key_hash(f"T#{i}"), i, TS) for i in range(5)]
    assert g.put_hashes(items, 1) == 4  # items 1..3 fit; 4 is the first left
    assert g.query("T#3", TS, TS, 5) == [3]
    assert g.query("T#4", TS, TS, 5) == []
    f.close()
    g.close()


def test_entries_survive_close_and_reopen(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "i", slots=8, entries=16)
    for i in range(6):
        f.put(f"T#k{i % 2}", i, TS + i * 1000)
    f.flush()
    header = f.header()
    f.close()
    g = IndexFile(tmp_path / "i", slots=8, entries=16)
    assert g.header() == header
    assert g.query("T#k0", TS, TS + 10_000, 10) == [4, 2, 0]
    g.put("T#k0", 6, TS + 6_000)  # appending goes on after the old entries
    assert g.query("T#k0", TS, TS + 10_000, 10) == [6, 4, 2, 0]
    assert g.header()[5] == 8
    g.close()


# -- damage ---------------------------------------------------------------------


def test_a_chain_that_loops_ends(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "i", slots=8, entries=16)
    for i in range(1, 4):
        f.put("T#k", i * 10, TS)
    f.close()
    path = tmp_path / "i"
    g = IndexFile(path, slots=8, entries=16)
    # Entry 1 chains back to entry 3: 3 -> 2 -> 1 -> 3 -> ...
    struct.pack_into(">i", g.mm, entry_at(g, 1) + 16, 3)
    out = g.query("T#k", TS, TS, 100)
    assert set(out) == {10, 20, 30} and len(out) <= 4  # bounded by the count
    # An entry that chains to itself.
    struct.pack_into(">i", g.mm, entry_at(g, 3) + 16, 3)
    assert g.query("T#k", TS, TS, 100) == [30]
    g.close()


def test_a_slot_or_count_past_the_entries_reads_nothing_wrong(
    tmp_path: Path,
) -> None:
    path = tmp_path / "i"
    f = IndexFile(path, slots=8, entries=16)
    f.put("T#a", 10, TS)
    f.put("T#b", 20, TS)
    slot = slot_at(f, "T#a")
    f.close()
    with open(path, "r+b") as fh:
        fh.seek(slot)
        fh.write(struct.pack(">i", 999_999))  # a damaged slot
    g = IndexFile(path, slots=8, entries=16)
    assert g.query("T#a", TS, TS, 10) == []  # points past the count
    assert g.query("T#b", TS, TS, 10) == [20]
    # Adding to the damaged slot treats it as empty: the chain starts afresh.
    g.put("T#a", 30, TS)
    assert g.query("T#a", TS, TS, 10) == [30]
    assert entry(g, 3)[3] == 0
    # A count beyond the file's entries is bounded by them.
    b, e, bo, eo, sc, _ = g.header()
    HEADER.pack_into(g.mm, 0, b, e, bo, eo, sc, 1_000_000)
    assert g.query("T#a", TS, TS, 10) == [30]
    g.close()


def test_readonly_file_cut_short(tmp_path: Path) -> None:
    path = tmp_path / "i"
    f = IndexFile(path, slots=8, entries=16)
    f.put("T#a", 1, TS)
    f.put("T#a", 2, TS)
    f.put("T#b", 3, TS)
    f.put("T#b", 4, TS)
    f.close()
    # Entries 0..2 left: all of key a's, none of b's newest.
    os.truncate(path, HEADER_SIZE + 8 * 4 + 3 * ENTRY_SIZE)
    ro = IndexFile(path, slots=8, entries=16, readonly=True)
    assert ro.short
    assert ro.query("T#a", TS, TS, 10) == [2, 1]
    assert ro.query("T#b", TS, TS, 10) == []
    ro.close()
    assert os.path.getsize(path) == HEADER_SIZE + 8 * 4 + 3 * ENTRY_SIZE
    os.truncate(path, HEADER_SIZE + 10)  # the slots themselves are cut
    ro = IndexFile(path, slots=8, entries=16, readonly=True)
    assert ro.query("T#a", TS, TS, 10) == []
    ro.close()
    os.truncate(path, 0)
    ro = IndexFile(path, slots=8, entries=16, readonly=True)
    assert ro.short and ro.query("T#a", TS, TS, 10) == []
    ro.close()


# -- the service -----------------------------------------------------------------


def names(root: Path) -> list[str]:
    return sorted(os.listdir(root / "index"))


def test_service_rolls_files_and_queries_newest_first(tmp_path: Path) -> None:
    svc = IndexService(tmp_path, slots=8, entries=4)  # three keys a file
    assert not svc.has_files() and svc.query("T#k", 0, 2**62, 10) == []
    items = [(100 * i, TS, "T", ["k", f"u{i}"]) for i in range(5)]
    assert svc.build(items) == 10
    files = names(tmp_path)
    assert len(files) == 4 and svc.has_files()
    # Named by the first item's store time; later names go up by a millisecond.
    first = time.strftime("%Y%m%d%H%M%S", time.localtime(TS / 1000)) + "000"
    assert files[0] == first
    assert all(len(n) == 17 and n.isdigit() for n in files)
    assert files == sorted(set(files))
    assert svc.query("T#k", TS, TS, 100) == [400, 300, 200, 100, 0]
    assert svc.query("T#k", TS, TS, 2) == [400, 300]
    assert svc.query("T#u3", TS, TS, 100) == [300]
    assert svc.query("X#k", TS, TS, 100) == []  # another topic
    svc.flush()
    svc.close()
    again = IndexService(tmp_path, slots=8, entries=4)
    assert again.query("T#k", TS, TS, 100) == [400, 300, 200, 100, 0]
    assert again.build([(500, TS + 1, "T", ["k"])]) == 1
    assert len(names(tmp_path)) == 4  # the last file had room
    assert again.query("T#k", TS, TS + 1, 1) == [500]
    again.close()


def test_service_truncate_beyond_deletes_files_that_begin_past_the_log(
    tmp_path: Path,
) -> None:
    svc = IndexService(tmp_path, slots=8, entries=3)  # two keys a file
    svc.build([(100 * i, TS + i, "T", ["k"]) for i in range(5)])
    files = names(tmp_path)
    assert len(files) == 3  # begin at offsets 0, 200, 400
    svc.truncate_beyond(250)  # the file beginning at 200 holds bytes below 250
    assert names(tmp_path) == files[:2]
    assert svc.query("T#k", TS, TS + 10, 10) == [300, 200, 100, 0]
    svc.truncate_beyond(200)
    assert names(tmp_path) == files[:1]
    assert svc.query("T#k", TS, TS + 10, 10) == [100, 0]
    svc.truncate_beyond(10**12)  # nothing past it
    assert names(tmp_path) == files[:1]
    # Indexing resumes into a new file after the one that is left.
    svc.build([(200, TS + 2, "T", ["k"])])
    assert len(names(tmp_path)) == 2 and names(tmp_path)[0] == files[0]
    assert svc.query("T#k", TS, TS + 10, 10) == [200, 100, 0]
    svc.close()


@pytest.mark.parametrize("at", [8, 0])  # end time's high byte, begin time's
def test_a_damaged_header_time_does_not_hide_the_entries(
    tmp_path: Path, at: int
) -> None:
    """One flipped bit in a header time (an end time below the begin time, or
    negative) made every lookup of the file miss: such a header is not
    trusted to skip the file or date its entries."""
    f = IndexFile(tmp_path / "i", slots=8, entries=16)
    for i in range(6):
        f.put(f"T#k{i % 2}", i, TS + i * 1000)
    f.mm[at] ^= 0x80
    assert f.query("T#k0", 0, 1 << 62, 10) == [4, 2, 0]
    assert f.query("T#k1", TS, TS + 10_000, 10) == [5, 3, 1]
    f.close()
