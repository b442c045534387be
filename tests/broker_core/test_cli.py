"""``python -m broker_core inspect``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from broker_core import Broker, Message

ROOT = Path(__file__).resolve().parents[2]


def _inspect(store: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker_core", "inspect", str(store), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_inspect_reports_segments_topics_depths_and_damage(
    store_dir: Path, small: dict
) -> None:
    with Broker.open(store_dir, **small) as b:
        b.send_batch([Message("Inspect", b"y" * 2000, queue_id=1) for _ in range(50)])
    out = _inspect(store_dir)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["records"] == 50 and info["crc_ok"] and info["clean_shutdown"]
    assert len(info["segments"]) == 2
    assert info["topics"]["Inspect"]["depths"] == [0, 50, 0, 0]
    seg = store_dir / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    data[5000] ^= 0xFF
    seg.write_bytes(bytes(data))
    bad = _inspect(store_dir)
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["first_bad_offset"] is not None
