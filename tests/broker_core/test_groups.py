"""Consumer group settings: ``config/subscriptionGroup.json`` shared by processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from broker_core import Broker
from broker_core.errors import InvalidGroupError, ValidationError
from broker_core.groups import GroupRegistry

ROOT = Path(__file__).resolve().parents[2]


def test_settings_round_trip_and_defaults(tmp_path):
    reg = GroupRegistry(tmp_path / "g.json")
    assert reg.get("G") is None
    assert not reg.is_fifo("G") and reg.max_attempts("G", 17) == 17
    reg.put("G", fifo=True, max_delivery_attempts=3)
    again = GroupRegistry(tmp_path / "g.json")  # another process's view
    assert again.is_fifo("G") and again.max_attempts("G", 17) == 3
    reg.put("G", fifo=False)
    assert [g.name for g in reg.all()] == ["G"]
    assert reg.max_attempts("G", 17) == 17  # None: the endpoint's default
    assert reg.delete("G") and not reg.delete("G")


def test_bad_settings_are_refused(tmp_path):
    reg = GroupRegistry(tmp_path / "g.json")
    with pytest.raises(InvalidGroupError):
        reg.put("bad group!")
    with pytest.raises(ValidationError):
        reg.put("G", max_delivery_attempts=0)
    assert not (tmp_path / "g.json").exists()


def test_a_damaged_file_falls_back_to_its_backup(tmp_path):
    path = tmp_path / "g.json"
    reg = GroupRegistry(path)
    reg.put("A", fifo=True)
    reg.put("B", max_delivery_attempts=2)  # the first version is now the .bak
    path.write_bytes(b"{garbled")
    assert GroupRegistry(path).is_fifo("A")


def test_cli_sets_groups_and_typed_topics_beside_an_open_store(tmp_path):
    store = tmp_path / "store"
    with Broker.open(store) as broker:  # a running process keeps it open

        def cli(*args):
            r = subprocess.run(
                [sys.executable, "-m", "broker_core", *args],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
            )
            return r.returncode, r.stdout

        rc, out = cli("topic", "create", str(store), "Orders", "--type", "fifo")
        assert rc == 0 and json.loads(out)["message_type"] == "FIFO"
        rc, out = cli(
            "group",
            "set",
            str(store),
            "billing",
            "--fifo",
            "--max-delivery-attempts",
            "5",
        )
        assert rc == 0
        rc, out = cli("topic", "create", str(store), "X", "--type", "nonsense")
        assert rc == 2 and "bad message type" in out
        broker.store.refresh_topics()
        assert broker.store.topics.topics["Orders"].message_type == "FIFO"
        g = broker.store.groups.get("billing")
        assert g is not None and g.fifo and g.max_delivery_attempts == 5


def test_concurrent_processes_lose_no_group(tmp_path):
    """Twelve ``group set`` processes at once: every group is kept (the
    registry locks the file across processes, not only threads)."""
    store = tmp_path / "store"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "broker_core",
                "group",
                "set",
                str(store),
                f"EG{i}",
                "--fifo",
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for i in range(12)
    ]
    assert [p.wait(60) for p in procs] == [0] * 12
    reg = GroupRegistry(store / "config" / "subscriptionGroup.json")
    assert sorted(g.name for g in reg.all()) == sorted(f"EG{i}" for i in range(12))


def test_a_damaged_file_never_replaces_its_backup(tmp_path):
    path = tmp_path / "g.json"
    reg = GroupRegistry(path)
    reg.put("A", fifo=True)
    reg.put("B")
    for n in range(3):  # damaged again after every write
        path.write_bytes(b"{garbled")
        reg = GroupRegistry(path)
        reg.put(f"C{n}")
        assert reg.is_fifo("A")
    assert GroupRegistry(path).is_fifo("A")
