"""A master process for the HA tests: ``python _haworkers.py master STORE ADDR
SECRET_FILE OUT OPTIONS_JSON``.

Opens the store, serves HA on ADDR, prints READY, then appends ``count``
messages (-1: until killed) in batches over topics HA-A (4 queues), HA-B (8)
and HA-C (2); with ``services`` it also sends transaction halves (committed,
rolled back or left pending) and delayed messages, delivering them in the
background; with ``sync`` a batch counts as acknowledged (and is recorded)
only once ``wait_replicated`` says a slave has it. Each acknowledged action
is appended to OUT as a JSON line before the next, so a SIGKILL loses nothing
the test was told about. With ``tls_cert`` and ``tls_key`` the HA port speaks
TLS only. Prints
``DONE <log end>`` and serves until SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _hahelpers import SETTINGS  # noqa: E402

from broker_core import Broker, Message  # noqa: E402
from broker_core.ha import start_ha_server  # noqa: E402
from broker_core.ha.protocol import read_secret  # noqa: E402
from broker_core.ha.tls import server_context  # noqa: E402

TOPICS = (("HA-A", 4), ("HA-B", 8), ("HA-C", 2))


def master(store: str, addr: str, secret_file: str, out: str, opts: dict) -> None:
    b = Broker.open(store, **SETTINGS)
    for name, n in TOPICS:
        if b.store.topic_config(name) is None:
            b.create_topic(name, n)
    tls = None
    if opts.get("tls_cert"):
        tls = server_context(opts["tls_cert"], opts["tls_key"])
    srv = start_ha_server(b.store, addr, read_secret(secret_file), tls=tls)
    tx = ds = None
    if opts.get("services"):
        from broker_core.schedule import DelayService
        from broker_core.transaction import TransactionService

        tx = TransactionService(b, transaction_timeout_ms=60_000)
        ds = DelayService(b, persist_interval_ms=200)
        ds.start()
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("READY", flush=True)
    count, batch = int(opts.get("count", 0)), int(opts.get("batch", 50))
    first = int(opts.get("first", 0))
    pause = float(opts.get("pause_s", 0))
    i, k = first, 0
    while (count < 0 or i < first + count) and not stop.is_set():
        n = batch if count < 0 else min(batch, first + count - i)
        msgs = []
        for j in range(i, i + n):
            topic, qn = TOPICS[j % 3]
            body = b"m%08d." % j + b"x" * (j % 300)
            msgs.append(Message(topic, body, keys=f"k{j}", queue_id=(j // 3) % qn))
        rs = b.send_batch(msgs)
        if opts.get("sync"):
            # SYNC_MASTER: acknowledged only once a slave has applied it.
            if not srv.wait_replicated(b.store.max_physical_offset(), 5.0):
                i += n
                continue
        lines = [
            json.dumps(
                {"kind": "msg", "seq": i, "n": n, "end": rs[-1].commit_log_offset}
            )
        ]
        if tx is not None and k % 5 == 0:
            r = tx.send_half("pg", Message("HA-T", b"half-%d" % k, keys=f"h{k}"))
            fate = ("pending", "commit", "rollback")[k // 5 % 3]
            if fate == "commit":
                tx.commit(r.transaction_id, "test")
            elif fate == "rollback":
                tx.rollback(r.transaction_id, "test")
            lines.append(
                json.dumps({"kind": "half", "tid": r.transaction_id, "fate": fate})
            )
        if ds is not None and k % 3 == 0:
            delay = 300 + (k * 137) % 2700
            r = ds.send_delayed(Message("HA-D", b"delayed-%d" % k), delay_ms=delay)
            lines.append(json.dumps({"kind": "delayed", "msg_id": r.msg_id}))
        os.write(fd, ("\n".join(lines) + "\n").encode())
        i += n
        k += 1
        if pause:
            time.sleep(pause)
    final = int(opts.get("final_delay_ms", 0))
    if ds is not None and final:
        r = ds.send_delayed(Message("HA-D", b"delayed-final"), delay_ms=final)
        os.write(
            fd, (json.dumps({"kind": "delayed", "msg_id": r.msg_id}) + "\n").encode()
        )
    print("DONE", b.store.max_physical_offset(), flush=True)
    stop.wait()
    srv.stop()
    if ds is not None:
        ds.close()
    if tx is not None:
        tx.close()
    b.close()


if __name__ == "__main__":
    cmd, store, addr, secret_file, out, opts = sys.argv[1:]
    assert cmd == "master"
    master(store, addr, secret_file, out, json.loads(opts))
