"""``diskio.DirListing``: a directory listed again only when it changed (the
index's files and the log's segments, looked at on every send after a restart
and every flush cycle), never missing a file another process added."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from broker_core import diskio
from broker_core.diskio import DirListing


def _age(d: Path, seconds: float) -> int:
    """Set the directory's modification time ``seconds`` in the past."""
    ns = time.time_ns() - int(seconds * 1e9)
    os.utime(d, ns=(ns, ns))
    return ns


def test_a_missing_directory_lists_nothing_until_it_exists(tmp_path: Path) -> None:
    d = tmp_path / "index"
    listing = DirListing(d)
    assert listing.names() == []
    d.mkdir()
    (d / "a").write_bytes(b"")
    assert listing.names() == ["a"]


def test_a_settled_listing_is_reused_until_the_directory_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a").write_bytes(b"")
    _age(tmp_path, 5)
    calls = []
    real = os.listdir
    monkeypatch.setattr(diskio.os, "listdir", lambda p: calls.append(p) or real(p))
    listing = DirListing(tmp_path)
    for _ in range(5):
        assert listing.names() == ["a"]
    assert len(calls) == 1  # one stat a look after the first
    (tmp_path / "b").write_bytes(b"")  # as another process adds a file
    assert sorted(listing.names()) == ["a", "b"]
    assert len(calls) == 2


def test_a_listing_taken_as_the_directory_changed_is_not_trusted(
    tmp_path: Path,
) -> None:
    """A file added within the same tick of the coarse modification time
    leaves it as it was: a listing taken that close to a change is taken
    again next time, so the file is seen."""
    (tmp_path / "a").write_bytes(b"")
    ns = _age(tmp_path, 0.0)  # changed just now
    listing = DirListing(tmp_path)
    assert listing.names() == ["a"]
    (tmp_path / "b").write_bytes(b"")
    os.utime(tmp_path, ns=(ns, ns))  # the same tick: no visible change
    assert sorted(listing.names()) == ["a", "b"]
