"""The JSON files a store keeps beside its log (``metadata.atomic_write_json``,
the endpoint's ``clients.json``): written whole by several threads of one
process at once."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from broker_core.endpoint.server import _write_json
from broker_core.metadata import atomic_write_json, temporary_name


def _hammer(
    write, path: Path, threads: int = 4, rounds: int = 150
) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def run(n: int) -> None:
        start.wait()
        for i in range(rounds):
            try:
                write(path, {"writer": n, "round": i, "pad": "x" * 4096})
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    ts = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


def test_threads_of_one_process_write_the_same_file_at_once(tmp_path: Path) -> None:
    """Both writers, four threads each on one file: no write fails (a
    temporary name made of the pid alone was shared, and one thread's rename
    found it gone: a shutdown's Traceback), the file parses, and no temporary
    file is left behind."""
    for write, name in (
        (atomic_write_json, "offsets.json"),
        (_write_json, "clients.json"),
    ):
        path = tmp_path / name
        assert _hammer(write, path) == []
        assert json.loads(path.read_text())["round"] == 149
        assert [p.name for p in tmp_path.glob(".*")] == []


def test_temporary_names_differ_by_thread(tmp_path: Path) -> None:
    names = {temporary_name(tmp_path / "a.json", "tmp")}
    t = threading.Thread(
        target=lambda: names.add(temporary_name(tmp_path / "a.json", "tmp"))
    )
    t.start()
    t.join()
    assert len(names) == 2
    assert all(n.parent == tmp_path and n.name.startswith(".a.json.") for n in names)
