"""A full disk, for real: a size-limited tmpfs the test mounts itself.

Sends fail with a clear error once the disk is full; nothing acknowledged is
lost, nothing that failed is stored, no process dies of a signal, the store
opens (and ``inspect``/``verify`` run) on the full disk, and appends resume
by themselves once space is freed. Where mounting is refused (not root), the
tests skip and say so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

from broker_core import Broker, Message
from broker_core.errors import StorageFullError

pytestmark = pytest.mark.crash

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {
    "segment_size": 1 << 20,
    "cq_units_per_file": 1024,
    "index_slots": 1024,
    "index_entries": 8192,
    "flush_interval_ms": 50,
}


def _mount_with_ballast(
    tmp_path: Path, args: list[str], what: str, ballast_mb: int
) -> Path:
    """Run ``mount ARGS MNT`` (skip, saying so, if refused), then fill
    ``ballast_mb`` of it with a file the test deletes to free space."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", *args, str(mnt)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        pytest.skip(f"mounting {what} was refused: {proc.stderr.strip()}")
    (mnt / "ballast").write_bytes(b"\xaa" * (ballast_mb << 20))
    return mnt


def _fill_up(path: Path) -> None:
    """Write ``path`` until the filesystem has no byte left (ENOSPC)."""
    with open(path, "wb", buffering=0) as fh:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError:
                pass


def _mount(tmp_path: Path, size_mb: int, ballast_mb: int) -> Path:
    """Mount a ``size_mb`` tmpfs holding ``ballast_mb`` of ballast."""
    args = ["-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs"]
    return _mount_with_ballast(tmp_path, args, "a tmpfs", ballast_mb)


def _mount_ext4(tmp_path: Path, size_mb: int, ballast_mb: int) -> Path:
    """Loop-mount a fresh ``size_mb`` ext4 image holding ``ballast_mb`` of ballast."""
    image = tmp_path / "ext4.img"
    with open(image, "wb") as fh:
        fh.truncate(size_mb << 20)
    mkfs = subprocess.run(
        ["mkfs.ext4", "-q", "-F", str(image)], capture_output=True, text=True
    )
    if mkfs.returncode != 0:
        pytest.skip(f"mkfs.ext4 is not available: {mkfs.stderr.strip()}")
    args = ["-o", "loop", str(image)]
    return _mount_with_ballast(tmp_path, args, "an ext4 image", ballast_mb)


@pytest.fixture(params=["tmpfs", "ext4"])
def small_fs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A small real filesystem mounted for this test (an 8 MiB tmpfs, or a
    loop-mounted 30 MiB ext4 image), with 2 MiB of ballast to free later."""
    if request.param == "tmpfs":
        mnt = _mount(tmp_path, 8, 2)
    else:
        mnt = _mount_ext4(tmp_path, 30, 2)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def endpoint_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs (room for the endpoint's default index) with 24 MiB of
    ballast: freeing it leaves room to build the index and send again."""
    mnt = _mount(tmp_path, 64, 24)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _run(code: str, *args: str, timeout: float = 120) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON line last."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}: {proc.stderr}"
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


FILL = """
import json, sys
from broker_core import Broker, Message
from broker_core.errors import StorageFullError
settings = json.loads(sys.argv[2])
b = Broker.open(sys.argv[1], **settings)
acked, failed, err = [], 0, ""
i = 0
while failed < 5 and i < 20000:
    body = b"m%06d-" % i + bytes(2048)
    i += 1
    try:
        b.send(Message("FULL", body, queue_id=i % 4))
        acked.append(body[:8].decode())
    except StorageFullError as exc:
        failed += 1
        err = str(exc)
b.close()
print(json.dumps({"acked": acked, "failed": failed, "error": err}))
"""

READ = """
import json, sys
from broker_core import Broker
b = Broker.open(sys.argv[1], **json.loads(sys.argv[2]))
bodies = []
for q in range(4):
    off = 0
    while True:
        r = b.pull("check", "FULL", q, off, 256)
        bodies += [m.body[:8].decode() for m in r.messages]
        if r.next_offset == off:
            break
        off = r.next_offset
info = b.store.recovery_info
b.close()
print(json.dumps({"bodies": bodies, "abnormal": info.abnormal if info else None}))
"""


def _read(store: Path, settings: dict) -> list[str]:
    return _run(READ, str(store), json.dumps(settings))["bodies"]


def test_readers_stop_at_holes_only_where_a_hole_read_can_fault(small_fs: Path):
    """On tmpfs a mapped read of a hole can SIGBUS, so readers stop at the
    first hole; on ext4 a hole reads as zeros and ``SEEK_HOLE`` is not trusted
    (during writeback of reserved blocks it has reported a hole over freshly
    written queue units, and an append then reused a queue offset)."""
    from broker_core.diskio import hole_reads_can_fault
    from broker_core.segment import Segment

    seg = Segment(small_fs / "seg", 0, 1 << 20, create=True)
    try:
        seg.write_mapped(0, b"x" * 100)
        fstype = subprocess.run(
            ["findmnt", "-no", "FSTYPE", str(small_fs)], capture_output=True, text=True
        ).stdout.strip()
        assert fstype in ("tmpfs", "ext4")
        tmpfs = fstype == "tmpfs"
        with open(seg.path, "rb") as f:
            assert hole_reads_can_fault(f.fileno()) is tmpfs
        if tmpfs:
            assert seg.data_end(0) == 4096  # the page written (reserved is not data)
            assert not seg.readable(0, 128 << 10)
        else:
            assert seg.data_end(0) == 1 << 20
            assert seg.readable(0, 1 << 20)
    finally:
        seg.close()


def test_facade_fills_the_disk_loses_nothing_and_resumes(small_fs: Path) -> None:
    store = small_fs / "store"
    settings = dict(SETTINGS, disk_space_warning_ratio=1.0)  # the real ENOSPC
    filled = _run(FILL, str(store), json.dumps(settings))
    acked = filled["acked"]
    assert filled["failed"] == 5 and "full" in filled["error"]
    assert len(acked) > 100
    # Reopen, inspect and verify while the disk is still full.
    got = _read(store, settings)
    assert sorted(got) == sorted(acked)  # every ack, no failed send, no phantom
    for cmd in ("inspect", "verify"):
        proc = subprocess.run(
            [sys.executable, "-m", "broker_core", cmd, str(store)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
        assert proc.returncode == 0, (cmd, proc.returncode, proc.stdout, proc.stderr)
    # Free space: appends resume in a store that stayed open through it all.
    with Broker.open(store, **settings) as b:
        with pytest.raises(StorageFullError):
            for _ in range(50):
                b.send(Message("FULL", b"x" * 4096, queue_id=0))
        # Not a byte left: a topic cannot be made, and is not kept in memory
        # either (a route, a send would otherwise see a topic the file lacks).
        _fill_up(small_fs / "filler")
        for _ in range(2):
            with pytest.raises(StorageFullError):
                b.create_topic("MadeOnAFullDisk")
            assert b.store.topic_config("MadeOnAFullDisk") is None
        assert not list((store / "config").glob(".*.tmp")), "a stray temp file"
        (small_fs / "filler").unlink()
        (small_fs / "ballast").unlink()
        for i in range(20):
            b.send(Message("FULL", b"after%03d" % i + bytes(100), queue_id=i % 4))
    again = _read(store, settings)
    assert set(acked) <= set(again)
    assert sum(1 for x in again if x.startswith("after")) == 20
    assert len(again) == len(set(again))


def test_the_disk_guard_refuses_appends_and_lets_reads_go_on(small_fs: Path) -> None:
    store = small_fs / "store"
    with Broker.open(store, **SETTINGS, disk_space_warning_ratio=0.6) as b:
        acked = []
        with pytest.raises(StorageFullError, match="60%") as err:
            for i in range(20000):
                b.send(Message("FULL", b"g%06d-" % i + bytes(2048), queue_id=i % 4))
                acked.append(b"g%06d-" % i)
        assert "reads and consumption go on" in str(err.value)
        # Refused near the limit, not after a burst overshot it.
        assert b.store.disk_guard.usage()[0] < 0.7
        got = []
        for q in range(4):
            r = b.pull("c", "FULL", q, 0, 20000)
            got += [m.body[:8] for m in r.messages]
        assert sorted(got) == sorted(acked)
        (small_fs / "ballast").unlink()
        deadline = time.monotonic() + 5
        while True:  # the guard looks again every 100 ms
            try:
                b.send(Message("FULL", b"resumed", queue_id=0))
                break
            except StorageFullError:
                assert time.monotonic() < deadline, "appends did not resume"
                time.sleep(0.05)


@pytest.mark.protocol
@pytest.mark.slow
def _query_route(port: int, topic: str):
    import grpc

    stub = sgrpc.MessagingServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    return stub.QueryRoute(
        spb.QueryRouteRequest(
            topic=pb.Resource(name=topic),
            endpoints=pb.Endpoints(addresses=[pb.Address(host="127.0.0.1", port=port)]),
        ),
        metadata=(("x-mq-client-id", "full-disk-test"),),
        timeout=10,
    )


def test_endpoint_with_the_official_client_on_a_full_disk(
    endpoint_fs: Path, tmp_path: Path
) -> None:
    from tests.endpoint_server import result, spawn, start_server, stop_server
    from tests.support import free_port

    store = endpoint_fs / "store"
    port = free_port()
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    proc = start_server(store, port, logs[0], ("--disk-ratio", "1.0"))
    try:
        filled = result(spawn("fill", f"127.0.0.1:{port}", "x", tmp_path), 300)
        assert proc.poll() is None, "the endpoint died"
        assert filled["failed"], "the disk never filled"
        assert any("disk" in e for e in filled["errors"]), filled["errors"]
        # The sends' failed appends gave their blocks back (a clean-clone run
        # then made the topic): the last bytes go to a filler, so the disk
        # is full when the route is asked.
        _fill_up(endpoint_fs / "filler")
        # A route to a new topic, which cannot be made: an error, not a route
        # to a topic that does not exist (the failure was swallowed).
        route = _query_route(port, "MadeOnAFullDisk")
        assert route.status.code != pb.Code.OK and not route.message_queues, route
        assert "MadeOnAFullDisk" in route.status.message
        # Asked again: a route only to a topic topics.json has (the failed
        # write left the topic in the endpoint's memory, and the second
        # answer was a route to it). The store may have freed a few blocks
        # meanwhile (a failed append gives back its reservation), so the
        # second write may succeed: then the file has the topic.
        again = _query_route(port, "MadeOnAFullDisk")
        topics = json.loads((store / "config" / "topics.json").read_bytes())
        made = "MadeOnAFullDisk" in topics["topicConfigTable"]
        assert (again.status.code == pb.Code.OK) == made, (again, made)
        assert bool(again.message_queues) == made, again
        assert not list((store / "config").glob(".*.tmp")), "a stray temp file"
    finally:
        code = stop_server(proc)  # stopped while the disk is still full
    assert code == 0, logs[0].read_text()[-3000:]
    # It starts again on the full disk; once space is freed, sends go through.
    proc = start_server(store, port, logs[1], ("--disk-ratio", "1.0"))
    try:
        (endpoint_fs / "ballast").unlink()
        (endpoint_fs / "filler").unlink()
        more = result(spawn("send_few", f"127.0.0.1:{port}", "x", tmp_path), 120)
        route = _query_route(port, "MadeOnAFullDisk")
        assert route.status.code == pb.Code.OK and route.message_queues, route
    finally:
        code = stop_server(proc)
    assert code == 0, logs[1].read_text()[-3000:]
    acked = {body for body, _id in filled["acked"] + more["acked"]}
    with Broker.open(store, **{"disk_space_warning_ratio": 1.0}) as b:
        stored = set()
        topic = "TFx"
        for q in range(b.store.get_topic(topic).queue_nums):
            off = 0
            while True:
                r = b.pull("check", topic, q, off, 256)
                stored |= {m.body[:20].decode() for m in r.messages}
                if r.next_offset == off:
                    break
                off = r.next_offset
        for body, msg_id in filled["acked"][:: max(1, len(filled["acked"]) // 20)]:
            assert b.get_message(msg_id).body[:20].decode() == body
    assert acked <= stored
    assert not (set(filled["failed"]) & stored), "a send reported as failed is stored"


INDEXED = """
import json, os, sys
from broker_core import Broker, Message
from broker_core.errors import StorageFullError
root, phase = sys.argv[1], sys.argv[2]
# The default index geometry (5M slots, 20M entries: 420 MB of address space)
# on a disk of a few MiB; small log segments.
settings = {"segment_size": 1 << 20, "index_in_background": False}
out = {}
b = Broker.open(root, **settings)
if phase == "send":
    b.create_topic("IX", 4, 4)
    ids = [b.send(Message("IX", b"x%04d" % i, keys=f"k{i}")).msg_id for i in range(300)]
    out["ids"] = ids
    out["found_now"] = sum(
        b.get_message(i, "IX").body == b"x%04d" % n for n, i in enumerate(ids)
    )
    index_dir = os.path.join(root, "index")
    out["index_bytes"] = sum(
        os.stat(os.path.join(index_dir, n)).st_blocks * 512
        for n in os.listdir(index_dir)
    )
    # Unindexed when the disk fills: sent now, indexed at the next lookup.
    late = [b.send(Message("IX", b"late%03d" % i, keys=f"late{i}")).msg_id
            for i in range(50)]
    out["late"] = late
else:
    ids = json.loads(sys.argv[3])
    found = 0
    for n, i in enumerate(ids):
        try:
            found += b.get_message(i, "IX") is not None
        except Exception as exc:
            out.setdefault("errors", []).append(repr(exc))
    out["found"] = found
    out["by_key"] = len(b.query_by_key("IX", "late7"))
b.close()
print(json.dumps(out))
"""


def test_the_index_takes_disk_as_it_grows_and_lookups_work_on_a_full_disk(
    small_fs: Path,
) -> None:
    """The default index reserved its 20 MB of slots up front: on a disk with
    less room nothing was indexed (lookups by id failed 100 of 100 until
    26 MiB were free) and sends were refused meanwhile. Now slot pages take
    blocks when first written, and a lookup the full disk keeps from indexing
    reads the not-yet-indexed records from the log."""
    store = small_fs / "store"
    sent = _run(INDEXED, str(store), "send")
    assert sent["found_now"] == 300
    assert sent["index_bytes"] < 2 << 20, sent["index_bytes"]
    # Fill the disk to the last block, then look everything up again in a
    # fresh process: the 50 late messages cannot all be indexed now.
    fd = os.open(small_fs / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:  # unbuffered: nothing left to fail at close
            os.write(fd, b"\xff" * 65536)
    except OSError:
        pass
    finally:
        os.close(fd)
    ids = sent["ids"] + sent["late"]
    looked = _run(INDEXED, str(store), "lookup", json.dumps(ids))
    assert looked.get("errors") is None, looked["errors"][:3]
    assert looked["found"] == 350
    assert looked["by_key"] == 1
