"""Processes for the transaction race and crash tests: ``python _txworkers.py CMD ...``.

race STORE IDS ROLE OUT GO: wait for file GO, then end every transaction listed in
IDS (shuffled) as ROLE (commit, rollback, check, operator); write one line per
id to OUT: "<id> <RESOLVED|ALREADY_RESOLVED|CONFLICT> <resolution>".
crash STORE ACK: send halves forever, committing every other one; after each
step append "H <id>" or "C <id>" to ACK. Killed by the test.
hang STORE ACK N: send N halves, append their ids to ACK, then sleep.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _txhelpers import SMALL, order  # noqa: E402

from broker_core import Broker  # noqa: E402
from broker_core.errors import TransactionConflictError  # noqa: E402
from broker_core.transaction import TransactionService  # noqa: E402


def race(store: str, ids_file: str, role: str, out: str, go: str) -> None:
    b = Broker.open(store, **SMALL)
    svc = TransactionService(b)
    ids = Path(ids_file).read_text().split()
    rnd = random.Random(os.getpid())
    rnd.shuffle(ids)
    lines = []
    while not os.path.exists(go):
        time.sleep(0.001)
    for tid in ids:
        if role == "commit":
            args = (tid, "pg", "COMMIT", "CLIENT")
        elif role == "rollback":
            args = (tid, "pg", "ROLLBACK", "CLIENT")
        elif role == "check":
            args = (tid, "pg", rnd.choice(["COMMIT", "ROLLBACK"]), "CHECK")
        else:
            args = (tid, None, rnd.choice(["COMMIT", "ROLLBACK"]), "OPERATOR")
        kw = {"operator": "ann"} if role == "operator" else {}
        try:
            res = svc.end_transaction(*args, **kw)
            lines.append(f"{tid} {res.status.value} {args[2]}")
        except TransactionConflictError:
            lines.append(f"{tid} CONFLICT {args[2]}")
    Path(out).write_text("\n".join(lines) + "\n")
    svc.close()
    b.close()


def crash(store: str, ack: str) -> None:
    b = Broker.open(store, **SMALL)
    svc = TransactionService(b)
    fd = os.open(ack, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    i = 0
    while True:
        r = svc.send_half("pg", order(i))
        os.write(fd, f"H {r.transaction_id}\n".encode())
        if i % 2 == 0:
            svc.end_transaction(r.transaction_id, "pg", "COMMIT")
            os.write(fd, f"C {r.transaction_id}\n".encode())
        i += 1


def hang(store: str, ack: str, n: int) -> None:
    b = Broker.open(store, **SMALL)
    svc = TransactionService(b)
    ids = [svc.send_half("pg", order(i)).transaction_id for i in range(n)]
    Path(ack).write_text("\n".join(ids) + "\n")
    time.sleep(3600)


if __name__ == "__main__":
    cmd, *rest = sys.argv[1:]
    if cmd == "race":
        race(*rest)
    elif cmd == "crash":
        crash(*rest)
    elif cmd == "hang":
        hang(rest[0], rest[1], int(rest[2]))
