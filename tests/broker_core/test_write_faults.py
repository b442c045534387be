"""Faults a test cannot make for real on this machine: EIO and a short write.

A failing disk (EIO) cannot be produced without a device-mapper error target;
a short ``pwrite`` needs the disk to fill mid-call. A fault-injection layer
replaces ``os.pwrite`` for the segment module only, at a chosen call, and the
store must behave as on a real full disk (``test_full_disk.py``): a typed
error, nothing of the failed append stored, later appends fine.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from broker_core import Broker, Message, PullStatus
from broker_core import segment as segment_module
from broker_core.errors import StorageFullError, StorageIOError


class _FaultyOs:
    """``os`` as the segment module sees it, with one ``pwrite`` replaced."""

    def __init__(self, fault: Callable[[int, bytes, int], int]) -> None:
        self._fault = fault
        self.armed = False

    def pwrite(self, fd: int, data: bytes, pos: int) -> int:
        if self.armed:
            self.armed = False
            return self._fault(fd, data, pos)
        return os.pwrite(fd, data, pos)

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)


def _eio(fd: int, data: bytes, pos: int) -> int:
    raise OSError(errno.EIO, "Input/output error")


def _short_then_full(fd: int, data: bytes, pos: int) -> int:
    # Half the bytes land; the retry of the rest finds the disk full.
    return os.pwrite(fd, bytes(data)[: len(data) // 2], pos)


def _bodies(b: Broker) -> list[bytes]:
    out: list[bytes] = []
    for q in range(4):
        off = 0
        while True:
            r = b.pull("g", "F", q, off, 64)
            out += [m.body for m in r.messages]
            if r.status is PullStatus.NO_NEW_MSG or r.next_offset == off:
                break
            off = r.next_offset
    return out


@pytest.mark.parametrize(
    ("fault", "error"), [(_eio, StorageIOError), (_short_then_full, StorageFullError)]
)
def test_a_failed_write_is_typed_and_stores_nothing(
    tmp_path: Path, small: dict, monkeypatch: pytest.MonkeyPatch, fault, error
) -> None:
    faulty = _FaultyOs(fault)
    monkeypatch.setattr(segment_module, "os", faulty)
    real_pwrite_all = segment_module.pwrite_all

    def full_on_retry(fd: int, data: object, pos: int, what: str) -> None:
        raise StorageFullError(f"{what}: the disk is full (injected)")

    if fault is _short_then_full:
        monkeypatch.setattr(segment_module, "pwrite_all", full_on_retry)
    store = tmp_path / "store"
    with Broker.open(store, **small) as b:
        b.send(Message("F", b"before", queue_id=0))
        faulty.armed = True
        with pytest.raises(error):
            b.send(Message("F", b"failed", queue_id=1))
        monkeypatch.setattr(segment_module, "pwrite_all", real_pwrite_all)
        b.send(Message("F", b"after", queue_id=2))
        assert sorted(_bodies(b)) == [b"after", b"before"]
    with Broker.open(store, **small) as b:  # and after a reopen
        assert sorted(_bodies(b)) == [b"after", b"before"]
