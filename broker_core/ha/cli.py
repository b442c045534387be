"""``python -m broker_core replicate|promote|ha-status``: run a slave, promote it, look.

``replicate STORE --master HOST:PORT --secret-file F`` follows a master until
SIGTERM (or until ``promote`` changes the role file), writing its status to
``STORE/ha/status.json`` every second; with ``--ha-tls-ca`` over TLS.
``promote STORE`` makes the store a master: a running ``replicate`` sees the
role change, stops following and exits. ``ha-status STORE`` prints the role
and the last status.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any

from broker_core.config import saved_geometry
from broker_core.ha.role import Role, read_role, write_role

COMMANDS = ("replicate", "promote", "ha-status")
STATUS_FILE = Path("ha") / "status.json"


def add_commands(sub: Any) -> None:
    """Add the HA subcommands to the ``python -m broker_core`` parser."""
    rep = sub.add_parser("replicate", help="follow a master's commit log (a slave)")
    rep.add_argument("store_dir")
    rep.add_argument("--master", required=True, help="the master's HA HOST:PORT")
    rep.add_argument("--secret-file", required=True, help="the shared HA secret")
    rep.add_argument(
        "--ha-tls-ca",
        default="",
        help="speak TLS to the master and trust this CA (or self-signed) certificate",
    )
    rep.add_argument(
        "--ha-tls-server-name",
        default="",
        help="the name the master's certificate must hold (default: the host "
        "of --master)",
    )
    rep.add_argument("--cluster", default="DefaultCluster")
    rep.add_argument("--broker", default="broker-a", help="the broker name")
    rep.add_argument(
        "--store-config",
        default="{}",
        help="JSON object of store settings; segment_size must be the master's "
        "(default: the store's config/store.json, else 1 GiB)",
    )
    pro = sub.add_parser("promote", help="make a slave store a writable master")
    pro.add_argument("store_dir")
    pro.add_argument(
        "--role", choices=("ASYNC_MASTER", "SYNC_MASTER"), default="ASYNC_MASTER"
    )
    st = sub.add_parser("ha-status", help="a store's HA role and replication status")
    st.add_argument("store_dir")


def run(args: argparse.Namespace) -> int:
    if args.cmd == "promote":
        return _promote(Path(args.store_dir), Role(args.role))
    if args.cmd == "ha-status":
        root = Path(args.store_dir)
        out: dict[str, Any] = {"role": read_role(root)}
        try:
            out["status"] = json.loads((root / STATUS_FILE).read_bytes())
        except (FileNotFoundError, ValueError):
            out["status"] = None
        print(json.dumps(out, indent=2))
        return 0
    return _replicate(args)


def _promote(root: Path, role: Role, timeout_s: float = 15.0) -> int:
    """Write the new role, then wait for a running ``replicate`` to stop
    following: only then may anything else append to the store."""
    record = write_role(root, role, promoted=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        path = root / STATUS_FILE
        try:
            status = json.loads(path.read_bytes())
            # Written every second while it runs: an old file is a dead process's.
            fresh = time.time() - path.stat().st_mtime < 3.0
        except (FileNotFoundError, ValueError):
            break
        if not status.get("following") or not fresh:
            break
        time.sleep(0.1)
    else:
        print(f"the replicate process of {root} is still following after {timeout_s}s")
        return 1
    from broker_core.ha.epochs import begin_epoch
    from broker_core.ha.slave import promotion_cause
    from broker_core.shared import SharedState

    # Whether or not a follower ran: every process sees the store writable now,
    # in a new epoch that starts at its log end (a follower that saw the role
    # change may have opened it already).
    state = SharedState(root)
    try:
        begin_epoch(state, root, promotion_cause(record))
        state.replica = False
    finally:
        state.close()
    print(json.dumps(record))
    return 0


def _store_settings(root: Path, given: str) -> dict[str, Any]:
    settings: dict[str, Any] = dict(saved_geometry(root))
    settings.update(json.loads(given))
    return settings


def _replicate(args: argparse.Namespace) -> int:
    from broker_core import Broker
    from broker_core.ha.protocol import read_secret
    from broker_core.ha.slave import SlaveFollower
    from broker_core.ha.tls import client_context
    from broker_core.logfmt import configure
    from broker_core.metadata import atomic_write_json

    configure()
    root = Path(args.store_dir)
    secret = read_secret(args.secret_file)
    if args.ha_tls_server_name and not args.ha_tls_ca:
        raise SystemExit("--ha-tls-server-name needs --ha-tls-ca")
    tls = client_context(args.ha_tls_ca) if args.ha_tls_ca else None
    broker = Broker.open(root, **_store_settings(root, args.store_config))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    follower = SlaveFollower(
        broker.store, args.master, secret, args.cluster, args.broker,
        tls=tls, server_name=args.ha_tls_server_name or None,
    ).start()  # fmt: skip
    status_path = root / STATUS_FILE
    try:
        while not stop.wait(1.0):
            atomic_write_json(status_path, follower.status())
            if read_role(root)["role"] != Role.SLAVE.value:
                logging.warning("role changed (promoted): no longer following")
                break
    finally:
        follower.stop()
        atomic_write_json(status_path, follower.status())
        broker.close()
    return 0
